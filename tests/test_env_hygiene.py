"""Records, logs kept in results and reports carry allow-listed environment variables only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import cli, records
from bench.core import allowlist
from tests.shared_sweep import SharedSweep


def test_argv_keeps_only_allowed_environment_entries() -> None:
    horovod = [
        "/bin/sh",
        "-c",
        "env HOROVOD_RANK=0 MY_API_TOKEN=abc123secret OMP_NUM_THREADS=1 HOME=/root "
        "_=/usr/bin/bench /venv/bin/python runners/hvd.py --label attempt=1 --label X_KEY=v",
    ]
    cmd = allowlist.scrub_argv(horovod)[2]
    assert "abc123secret" not in cmd and "MY_API_TOKEN" not in cmd and "HOME" not in cmd
    assert cmd.startswith("env HOROVOD_RANK=0 OMP_NUM_THREADS=1 /venv/bin/python runners/hvd.py")
    assert "attempt=1" in cmd and "X_KEY=<redacted>" in cmd
    assert allowlist.scrub_argv(["env", "NCCL_DEBUG=INFO", "AWS_SECRET=x", "python", "a.py"]) == [
        "env",
        "NCCL_DEBUG=INFO",
        "python",
        "a.py",
    ]
    # an allowed prefix does not let a secret-named variable through
    assert allowlist.scrub_argv(["env", "HOROVOD_TOKEN=x", "p"]) == ["env", "p"]
    assert allowlist.scrub_shell("cd /r && exec env GLOO_SOCKET_IFNAME=lo PASSWORD=pw p") == (
        "cd /r && exec env GLOO_SOCKET_IFNAME=lo p"
    )
    assert "pw" not in allowlist.scrub_shell("env 'PASSWORD=pw p")  # unbalanced quotes


def test_paddle_environment_dumps_are_scrubbed(tmp_path: Path) -> None:
    env = {"MY_API_TOKEN": "tok-123456", "HOME": "/root", "FLAGS_x": "1", "OMP_NUM_THREADS": "1"}
    (tmp_path / "envlog.0").write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    (tmp_path / "backup_env.0.json").write_text(json.dumps(env))
    (tmp_path / "default.abc.log").write_text(f"environ({env!r})\nstarted\n")
    (tmp_path / "workerlog.0").write_text("crash dump: tok-123456\n")
    changed = allowlist.scrub_log_dir(tmp_path, environ=env)
    assert len(changed) == 4
    for path in tmp_path.iterdir():
        text = path.read_text()
        assert "tok-123456" not in text and "HOME" not in text, path
    assert (tmp_path / "envlog.0").read_text() == "FLAGS_x=1\nOMP_NUM_THREADS=1\n"
    assert json.loads((tmp_path / "backup_env.0.json").read_text()) == {
        "FLAGS_x": "1",
        "OMP_NUM_THREADS": "1",
    }
    assert "started" in (tmp_path / "default.abc.log").read_text()


def test_recorded_env_vars_are_allow_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_API_TOKEN", "tok-abcdef")
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    rec = records.new_record({}, "ddp", 1, {}, {"name": "x", "argv": ["env", "MY_API_TOKEN=1"]})
    assert rec["env"]["env_vars"]["NCCL_DEBUG"] == "WARN"
    assert rec["env"]["env_vars"]["CUDA_VISIBLE_DEVICES"] == "0"
    assert "MY_API_TOKEN" not in json.dumps(rec)


@pytest.mark.distributed
def test_a_secret_in_the_environment_reaches_no_record_log_or_report(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    shared_sweep: SharedSweep,
) -> None:
    """Every engine through its real launcher, with secrets in the shell environment: the
    session's sweep ran with them (tests/shared_sweep.py); its reports are made here."""
    secret = shared_sweep.secret
    monkeypatch.setenv("MY_API_TOKEN", secret)
    monkeypatch.setenv("SOME_UNRELATED_VAR", "plain-" + secret)  # not named like a secret
    results = shared_sweep.results
    recs = records.load([results]).records
    assert [r["status"] for r in recs] == ["ok"] * len(recs), shared_sweep.stderr[-3000:]
    assert {r["launcher"]["name"] for r in recs} == {
        "horovodrun",
        "torchrun",
        "paddle.distributed.launch",
    }
    for r in recs:  # schema 2's timing, machine and numbers, from real runners
        assert r["schema_version"] == records.SCHEMA_VERSION
        assert r["run_start"] < r["run_stop"]
        assert 0 < (r["training_wall_s"] or 0) < (r["launch_to_stop_s"] or 0)
        assert r["labels"]["repeat"] == 0 and isinstance(r["labels"]["launched_at"], float)
        assert r["env"]["machine"]["cpu"] and r["env"]["git"]["commit"]
        assert all("elapsed_s" in e for e in r["epochs"])
    hvd = next(r for r in recs if r["engine"] == "horovod")
    assert hvd["knobs"]["cycle_time_ms"] is None  # Horovod's default, not the string "default"
    # reports, next to the records
    assert (
        cli.main(["compare", str(results), "--format", "html", "--out", str(tmp_path / "r")]) == 0
    )
    assert cli.main(["compare", str(results), "--sources"]) == 0
    assert cli.main(["export", "--pytest-benchmark", str(tmp_path / "e.json"), str(results)]) == 0
    printed = "".join(capsys.readouterr())
    files = [p for folder in (tmp_path, results) for p in folder.rglob("*") if p.is_file()]
    assert len(files) > 10
    for path in files:
        data = path.read_bytes()
        for needle in (secret.encode(), b"MY_API_TOKEN", b"SOME_UNRELATED_VAR"):
            assert needle not in data, f"{needle!r} in {path}"
    assert secret not in printed
    assert secret not in shared_sweep.stdout and secret not in shared_sweep.stderr
