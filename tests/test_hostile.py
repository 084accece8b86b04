"""Hostile but fair input: diverging runs, non-finite settings, signals, host names,
config files of the wrong types, a full disk, and smaller traps. Each must end in a
record or a one-line error, never a traceback, a hang, a lost record or an orphan."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from bench import records
from bench.contract.spec import Device, RunSpec, SpecError
from bench.engines import Engine
from tests.conftest import ROOT, run_bench, run_direct, run_engine
from tests.test_faults import _procs_with

ENGINES = [Engine.HOROVOD, Engine.DDP, Engine.PADDLE]


def _one_line_error(proc: subprocess.CompletedProcess[str], message: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and message in lines[0], proc.stderr


# -- item: a diverging run keeps its record ------------------------------------------


def test_nonfinite_values_are_written_as_null_and_listed(tmp_path: Path) -> None:
    # an ok record must hold numbers (bench/schema.py): this is a diverged one
    rec = records.new_record({"lr": 1.0}, "ddp", 1, {}, {}, status=records.Status.DIVERGED)
    rec.update(
        {
            "final_loss": math.nan,
            "step_losses": [1.0, math.inf, -math.inf],
            "epochs": [{"train_loss": math.nan, "steps": 3}],
        }
    )
    records.append(tmp_path, rec)
    (got,) = records.load([tmp_path]).records
    assert got["final_loss"] is None and got["step_losses"] == [1.0, None, None]
    assert got["epochs"] == [{"train_loss": None, "steps": 3}]
    assert got["nonfinite_fields"] == [
        "final_loss",
        "step_losses[1]",
        "step_losses[2]",
        "epochs[0].train_loss",
    ]
    assert math.isnan(float(rec["final_loss"] or 0))  # the caller's record is left alone


@pytest.mark.distributed
@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.value)
def test_diverging_run_is_recorded_diverged(engine: Engine, tmp_path: Path) -> None:
    proc, recs = run_engine(
        engine, 2, ["--model", "mlp", "--max-steps", "40", "--lr", "100"], tmp_path
    )
    assert proc.returncode != 0
    assert "not JSON compliant" not in proc.stdout + proc.stderr
    assert len(recs) == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    rec = recs[0]
    assert rec["status"] == records.Status.DIVERGED, rec.get("error")
    at = rec["diverged_at_step"]
    assert isinstance(at, int) and 0 <= at < 40
    assert rec["step_losses"][at] is None and f"step_losses[{at}]" in rec["nonfinite_fields"]
    assert all(v is not None for v in rec["step_losses"][:at])
    assert f"at step {at}" in rec["error"]
    shown = run_bench("compare", str(tmp_path))
    assert shown.returncode == 0, shown.stderr
    assert f"diverged: {engine.value} np=2" in shown.stdout


FLOAT_FIELDS = [
    "lr",
    "lr_warmup_epochs",
    "momentum",
    "weight_decay",
    "bucket_mb",
    "bn_momentum",
    "bn_eps",
    "test_fraction",
]


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan], ids=["inf", "-inf", "nan"])
@pytest.mark.parametrize("field", FLOAT_FIELDS)
def test_spec_refuses_nonfinite_floats(field: str, value: float) -> None:
    with pytest.raises(SpecError, match=f"{field} must be a finite number"):
        RunSpec.from_dict({field: value})


def test_every_float_field_is_covered() -> None:
    import dataclasses
    import typing

    hints = typing.get_type_hints(RunSpec)
    floats = [f.name for f in dataclasses.fields(RunSpec) if hints[f.name] is float]
    assert sorted(floats) == sorted(FLOAT_FIELDS)


@pytest.mark.parametrize(
    "args",
    [
        ["--lr", "inf"],
        ["--bucket-mb", "inf"],
        ["--weight-decay", "nan"],
        ["--bn-eps", "nan"],
        ["--lr-warmup-epochs", "inf"],
    ],
    ids=lambda a: a[0],
)
def test_runner_refuses_nonfinite_settings(args: list[str], tmp_path: Path) -> None:
    proc, recs = run_direct(Engine.DDP, args, tmp_path)
    _one_line_error(proc, "must be a finite number")
    assert recs == []


def test_sweep_refuses_infinite_bucket(tmp_path: Path) -> None:
    proc = run_bench(
        "run", "--engines", "ddp,paddle", "--workers", "1", "--models", "mlp",
        "--bucket-mb", "inf", "--results", str(tmp_path),
    )  # fmt: skip
    _one_line_error(proc, "bucket_mb must be a finite number")
    assert not (tmp_path / "runs").exists()


def test_negative_seed_is_refused(tmp_path: Path) -> None:
    proc, recs = run_direct(Engine.DDP, ["--seed", "-1"], tmp_path)
    _one_line_error(proc, "seed must be in [0, 2**32)")
    assert recs == []
    proc = run_bench(
        "run", "--engines", "ddp", "--workers", "1", "--seed", "-1", "--results", str(tmp_path)
    )
    _one_line_error(proc, "seed must be in [0, 2**32)")


# -- item: SIGTERM and SIGHUP to `bench run` ------------------------------------------


def _wait_for(cond: object, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not cond():  # type: ignore[operator]
        time.sleep(0.2)


@pytest.mark.distributed
@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)], ids=["SIGTERM", "SIGHUP"]
)
def test_signal_stops_the_sweep_kills_the_cell_and_records_it(
    sig: signal.Signals, code: int, tmp_path: Path
) -> None:
    args = [
        sys.executable, "-m", "bench", "run", "--engines", "ddp", "--workers", "2",
        "--models", "mlp", "--repeats", "1", "--epochs", "400", "--no-comm-cost",
        "--timeout", "300", "--results", str(tmp_path), "--no-compare",
    ]  # fmt: skip
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    # the cell is running once its launcher and two workers are (started or training: a
    # cell stopped either way is killed and recorded)
    _wait_for(lambda: len(_procs_with(str(tmp_path))) >= 4, 120)
    assert len(_procs_with(str(tmp_path))) >= 4, "the cell never started"
    sent = time.monotonic()
    os.kill(proc.pid, sig)
    out, err = proc.communicate(timeout=60)
    took = time.monotonic() - sent
    print(f"{sig.name}: bench run exited {took:.2f}s after the signal")
    assert proc.returncode == code, out + err
    assert f"stopped by {sig.name}" in err and "rerun to resume" in err
    assert _procs_with(str(tmp_path)) == [], "workers outlived the stopped sweep"
    (rec,) = records.load([tmp_path]).records
    assert rec["status"] == records.Status.FAILED
    assert f"interrupted by {sig.name}" in str(rec["error"])


# -- item: option injection through host names -----------------------------------------


@pytest.mark.parametrize(
    "name",
    ["-oProxyCommand=/tmp/x", "-p22", "a/b", "a..b", ".a", "a-", "a b", "a@b", "a\tb", "x" * 64],
)
def test_host_names_outside_the_grammar_are_refused(name: str, tmp_path: Path) -> None:
    from bench.launch import cluster as launch

    with pytest.raises(launch.LaunchError, match="host name"):
        launch.parse_hosts(f"{name}:1")
    hostfile = tmp_path / "hosts"
    hostfile.write_text(f"{name} slots=1\n")
    with pytest.raises(launch.LaunchError, match=r"host (name|entry)"):
        launch.read_hostfile(hostfile)


def test_host_names_and_addresses_are_accepted() -> None:
    from bench.launch import cluster as launch

    names = "node-1:1,10.0.0.2:1,gpu_box.example.org:1,N2:1"
    assert [h.name for h in launch.parse_hosts(names)] == [
        "node-1",
        "10.0.0.2",
        "gpu_box.example.org",
        "N2",
    ]


def test_ssh_gets_the_host_after_a_double_dash() -> None:
    from bench.launch import cluster as launch

    hosts = launch.parse_hosts("n1:1")
    argv = launch.Cluster(hosts, remote_shell="ssh -o BatchMode=yes {host} bash -lc").remote(
        hosts[0], ["true"]
    )
    assert argv[:6] == ["ssh", "-o", "BatchMode=yes", "--", "n1", "bash"]
    # a shell that has no "--" before its host is left as written
    argv = launch.Cluster(hosts, remote_shell="ip netns exec bench-{host} sh -c").remote(
        hosts[0], ["true"]
    )
    assert argv[:6] == ["ip", "netns", "exec", "bench-n1", "sh", "-c"]


@pytest.mark.parametrize("where", ["--hosts", "--hostfile"])
def test_host_cannot_inject_a_remote_shell_option(where: str, tmp_path: Path) -> None:
    """The reported exploit: ssh's -oProxyCommand given as a host ran a local script."""
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.sh"
    evil.write_text(f"#!/bin/sh\ntouch {marker}\n")
    evil.chmod(0o755)
    host = f"-oProxyCommand={evil}"
    if where == "--hostfile":
        hostfile = tmp_path / "hosts"
        hostfile.write_text(f"{host} slots=1\n")
        target = ["--hostfile", str(hostfile)]
    else:
        target = [f"--hosts={host}:1"]
    proc = run_bench(
        "run", *target, "--remote-shell", "ssh -o BatchMode=yes {host} bash -lc",
        "--engines", "ddp", "--models", "mlp", "--repeats", "1", "--epochs", "1",
        "--no-comm-cost", "--timeout", "60", "--results", str(tmp_path / "res"),
    )  # fmt: skip
    _one_line_error(proc, "host name '-oProxyCommand=")
    time.sleep(1)
    assert not marker.exists(), "the host name ran a command"
    assert not (tmp_path / "res" / "runs").exists()


# -- item: config files hold values of any type ---------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("workers = 2", "workers must be a list of integers, e.g. workers = [...], got 2"),
        ('workers = [1, "2"]', "workers must be a list of integers"),
        ("workers = [true]", "workers must be a list of integers"),
        ('timeout = "fast"', "timeout must be a number, got 'fast'"),
        ("timeout = inf", "timeout must be a finite number"),
        ("hosts = 5", "hosts must be a string, got 5"),
        ('engines = "ddp"', "engines must be a list of names, e.g. engines = [...], got 'ddp'"),
        ('oversubscribe = "no"', "oversubscribe must be true or false, got 'no'"),
        ("repeats = 1.5", "repeats must be an integer, got 1.5"),
        ('models = "mlp"', "models must be a list of strings"),
        ("[spec]\nlr = nan", "lr must be a finite number"),
        ('[spec]\nbatch_size = "many"', "batch_size must be an integer, got 'many'"),
    ],
)
def test_config_values_are_type_checked(text: str, message: str, tmp_path: Path) -> None:
    cfg = tmp_path / "sweep.toml"
    cfg.write_text(text + "\n")
    proc = run_bench("run", "--config", str(cfg), "--results", str(tmp_path))
    _one_line_error(proc, message)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("bad.toml", b'engines = ["ddp"]\n# caf\xe9\n', "is not UTF-8 text (byte 0xe9"),
        ("deep.yaml", b"engines: " + b"[" * 5000 + b"]" * 5000 + b"\n", "nests too deeply"),
        ("deep.toml", b"engines = " + b"[" * 5000 + b"]" * 5000 + b"\n", "nests too deeply"),
        ("keys.yaml", b"5: 1\nx: 2\n", "unknown sweep setting(s): 5, x"),
        ("bad.yaml", b"engines: [ddp\nworkers: 1\n", "does not parse"),
    ],
    ids=["non-utf8", "yaml-5000-deep", "toml-5000-deep", "int-keys", "yaml-syntax"],
)
def test_hostile_config_files_get_one_line_errors(
    name: str, content: bytes, message: str, tmp_path: Path
) -> None:
    cfg = tmp_path / name
    cfg.write_bytes(content)
    proc = run_bench("run", "--config", str(cfg), "--results", str(tmp_path))
    _one_line_error(proc, message)


# -- item: a full disk ----------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs: a disk that can really fill up (needs root; skipped otherwise)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def _fill(disk: Path, leave: int) -> None:
    """Fill `disk` with a filler file, then give back `leave` bytes."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        with contextlib.suppress(OSError):  # until the disk is full
            while True:
                os.write(fd, b"\0" * 4096)
    finally:
        os.close(fd)
    os.truncate(filler, max(filler.stat().st_size - leave, 0))


def test_record_that_does_not_fit_leaves_no_partial_line(small_disk: Path) -> None:
    results = small_disk / "res"
    first = records.new_record({"lr": 1.0}, "ddp", 1, {}, {}, status=records.Status.FAILED)
    records.append(results, first)
    _fill(small_disk, 4096)
    before = records.results_file(results).read_bytes()
    big = records.new_record({"lr": 1.0}, "ddp", 1, {}, {}, status=records.Status.FAILED)
    # ~40 KB even packed (random float32s do not compress): more than is left
    big["step_losses"] = np.random.default_rng(0).random(8000).tolist()
    with pytest.raises(records.RecordsError, match="no space left on device") as info:
        records.append(results, big)
    assert "\n" not in str(info.value) and "nothing partial was kept" in str(info.value)
    assert records.results_file(results).read_bytes() == before
    (kept,) = records.load([results]).records
    assert kept["run_id"] == first["run_id"]


def test_runner_on_a_full_disk_says_so(small_disk: Path) -> None:
    results = small_disk / "res"
    results.mkdir()
    _fill(small_disk, 0)
    proc, _ = run_direct(Engine.DDP, ["--model", "mlp", "--max-steps", "10"], results)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "error: no space left on device to write a record" in proc.stderr
    target = records.results_file(results)
    assert not target.exists() or target.read_bytes() == b""


def test_sweep_on_a_full_disk_says_so(small_disk: Path) -> None:
    results = small_disk / "res"
    results.mkdir()
    _fill(small_disk, 0)
    proc = run_bench(
        "run", "--engines", "ddp", "--workers", "1", "--models", "mlp", "--repeats", "1",
        "--max-steps", "10", "--results", str(results), timeout=180,
    )  # fmt: skip
    _one_line_error(proc, "No space left on device")


# -- smaller traps --------------------------------------------------------------------

GOLDEN = Path(__file__).parent / "data" / "golden.jsonl"


def test_compare_base_new_writes_its_out_file_or_refuses(tmp_path: Path) -> None:
    for name in ("base", "new"):
        (tmp_path / name).mkdir()
        shutil.copy(GOLDEN, tmp_path / name / "runs.jsonl")
    base, new = str(tmp_path / "base"), str(tmp_path / "new")
    html = run_bench(
        "compare", "--base", base, "--new", new, "--format", "html", "--out", str(tmp_path / "h")
    )
    _one_line_error(html, "--format html draws one set's tables")
    assert not (tmp_path / "h").exists()
    md = run_bench(
        "compare",
        "--base",
        base,
        "--new",
        new,
        "--format",
        "markdown",
        "--out",
        str(tmp_path / "m"),
    )
    assert md.returncode == 0, md.stderr
    written = (tmp_path / "m" / "diff.md").read_text()
    assert written.startswith("**NOT SIGNIFICANTLY CHANGED") and "\n| comparison" in written
    assert written.strip() == md.stdout.strip()


def test_a_fifo_named_jsonl_does_not_hang_compare(tmp_path: Path) -> None:
    shutil.copy(GOLDEN, tmp_path / "runs.jsonl")
    os.mkfifo(tmp_path / "trap.jsonl")  # opening it to read would block forever
    proc = run_bench("compare", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "trap.jsonl:0: not a regular file; skipped" in proc.stderr
    assert "throughput" in proc.stdout
    proc = run_bench("compare", str(tmp_path / "trap.jsonl"))
    assert "not a regular file or directory" in proc.stderr and proc.returncode == 1


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("ddp:nosuch=1", "unknown ddp engine option(s): nosuch; known: none"),
        ("horovod:fusion=1", "unknown horovod engine option(s): fusion; known: controller"),
        ("horovod:adasum=maybe", "engine option adasum must be true or false"),
        ("horovod:cycle_time_ms=fast", "engine option cycle_time_ms must be a number > 0"),
        ("ddp:=1", "must look like ENGINE:KEY=VALUE"),
    ],
)
def test_sweep_refuses_engine_options_before_launch(
    option: str, message: str, tmp_path: Path
) -> None:
    proc = run_bench(
        "run", "--engines", "ddp,horovod", "--workers", "1", "--models", "mlp",
        "--engine-option", option, "--results", str(tmp_path),
    )  # fmt: skip
    _one_line_error(proc, message)
    assert not (tmp_path / "runs").exists()


def test_engine_options_are_declared_once() -> None:
    from bench import engines
    from runners.adapters.horovod_engine import HorovodAdapter

    assert "cycle_time_ms" in engines.get(Engine.HOROVOD).options
    with pytest.raises(SpecError, match="unknown horovod engine option"):
        HorovodAdapter(RunSpec(model="mlp", device=Device.CPU), options={"nosuch": "1"})


def _has_gpu() -> bool:
    from bench.contract.spec import detect_device

    return detect_device() is Device.CUDA


@pytest.mark.skipif(_has_gpu(), reason="this machine has a CUDA GPU")
def test_cuda_without_a_gpu_is_refused_before_launch(tmp_path: Path) -> None:
    proc = run_bench(
        "run", "--engines", "ddp,paddle", "--workers", "1", "--models", "mlp",
        "--device", "cuda", "--results", str(tmp_path),
    )  # fmt: skip
    _one_line_error(proc, "device=cuda but no CUDA GPU is visible on this machine")
    assert not (tmp_path / "runs").exists()
    for engine in (Engine.DDP, Engine.PADDLE):
        proc, recs = run_direct(engine, ["--device", "cuda"], tmp_path)
        _one_line_error(proc, "device=cuda but no CUDA GPU is visible")
        assert recs == []
