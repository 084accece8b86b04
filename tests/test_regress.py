"""bench compare BASE NEW: matching, significance, direction of metrics, --fail exit codes."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import records
from bench.records.types import LoadedRecord
from bench.tables import regress
from tests.conftest import ROOT, run_bench

GOLDEN = Path(__file__).parent / "data" / "golden.jsonl"


def _golden() -> list[LoadedRecord]:
    return records.load([GOLDEN]).records


def _scaled(
    recs: list[LoadedRecord], throughput: float = 1.0, step: float = 1.0
) -> list[LoadedRecord]:
    out = copy.deepcopy(recs)
    for r in out:
        tp = r.get("throughput")
        if tp:
            r["throughput"] = tp * throughput
        r["step_times_s"] = [[t * step for t in rank] for rank in r.get("step_times_s", [])]
    return out


def _write(path: Path, recs: list[LoadedRecord]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for r in recs:
        records.append(path, {k: v for k, v in r.items() if k != "_source"})
    return path


@pytest.mark.parametrize(
    ("text", "metric", "limit"),
    [("throughput:5%", "throughput", 0.05), (" accuracy : 0.5 % ", "accuracy", 0.005)],
)
def test_checks_parse(text: str, metric: str, limit: float) -> None:
    check = regress.RegressionCheck.parse(text)
    assert (check.metric, check.limit) == (metric, pytest.approx(limit))


@pytest.mark.parametrize(
    ("text", "message"), [("throughput=5", "METRIC:N%"), ("speed:5%", "unknown")]
)
def test_bad_checks_are_named(text: str, message: str) -> None:
    with pytest.raises(regress.CheckError, match=message):
        regress.RegressionCheck.parse(text)


def test_identical_sets_show_no_significant_change() -> None:
    df = regress.diff(_golden(), _golden())
    assert len(df) == 4  # ddp/horovod x 1/2 workers; the timed-out paddle cell has no ok runs
    assert (df["throughput change"] == 0).all() and not df["throughput significant"].any()


def test_planted_drop_is_significant_and_fails_the_check() -> None:
    df = regress.diff(_golden(), _scaled(_golden(), throughput=0.8))
    row = df.set_index(["engine", "workers"]).loc[("ddp", 2)]
    assert row["throughput change"] == pytest.approx(-0.2)
    assert row["throughput significant"]
    check = regress.RegressionCheck.parse("throughput:5%")
    failing = {(r["engine"], r["workers"]) for r in df.to_dict("records") if check.fails(r)}
    # ddp np=1 ran 100, 110, 90 samples/s: with +-10% spread and 3 runs a side, a 20% drop
    # is inside the 95% interval ([0.64, 1.00]); a percentile bootstrap called it significant.
    assert failing == {("ddp", 2), ("horovod", 1), ("horovod", 2)}
    steep = regress.diff(_golden(), _scaled(_golden(), throughput=0.7)).to_dict("records")
    assert all(check.fails(r) for r in steep)
    assert not any(
        regress.RegressionCheck.parse("throughput:25%").fails(r) for r in df.to_dict("records")
    )


def test_direction_of_metrics() -> None:
    faster = regress.diff(_golden(), _scaled(_golden(), throughput=1.2)).to_dict("records")
    assert not any(regress.RegressionCheck.parse("throughput:5%").fails(r) for r in faster)
    slower_steps = regress.diff(_golden(), _scaled(_golden(), step=1.5)).to_dict("records")
    assert all(regress.RegressionCheck.parse("step_p50:10%").fails(r) for r in slower_steps)
    quicker_steps = regress.diff(_golden(), _scaled(_golden(), step=0.5)).to_dict("records")
    assert not any(regress.RegressionCheck.parse("step_p50:10%").fails(r) for r in quicker_steps)


def test_small_changes_are_not_significant() -> None:
    df = regress.diff(_golden(), _scaled(_golden(), throughput=0.99))
    assert not df["throughput significant"].any()  # below the 3% minimum effect


def test_cli_exit_codes_and_markdown(tmp_path: Path) -> None:
    base = _write(tmp_path / "base", _golden())
    same = _write(tmp_path / "same", _golden())
    drop = _write(tmp_path / "drop", _scaled(_golden(), throughput=0.8))
    ok = run_bench("compare", "--base", str(base), "--new", str(same), "--fail", "throughput:5%")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = run_bench(
        "compare",
        *("--base", str(base), "--new", str(drop)),
        *("--fail", "throughput:5%", "--format", "markdown"),
    )
    assert bad.returncode == 1
    assert "REGRESSION:" in bad.stderr and "throughput -20.0%" in bad.stderr
    assert bad.stdout.startswith("**CHANGED SIGNIFICANTLY: worse: ddp x2 samples/s -20.0%")
    assert "\n| comparison" in bad.stdout and "(-20.0%) *" in bad.stdout
    js = run_bench("compare", "--base", str(base), "--new", str(drop), "--format", "json")
    assert js.returncode == 0  # no --fail: report only
    assert json.loads(js.stdout)[0]["throughput change"] == pytest.approx(-0.2)


def test_one_number_format_and_milliseconds(tmp_path: Path) -> None:
    base = _write(tmp_path / "base", _golden())
    fast = _write(tmp_path / "fast", _scaled(_golden(), throughput=100.0))
    out = run_bench("compare", "--base", str(base), "--new", str(fast)).stdout
    assert "e+" not in out  # no scientific notation beside plain numbers
    assert "samples/s" in out and "step p50 ms" in out
    assert "100 -> 10,000 (+9900.0%) *" in out  # ddp np=1: thousands separators on both sides
    # step p50 in ms (0.02 s), as in the tables; the same on every row, so said once
    # under the table, in a line that may wrap
    assert "step p50 ms 20.00 -> 20.00 (+0.0%)" in " ".join(out.split())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--fail", "throughput:5%"], "--fail needs --base PATH and --new PATH"),
        (["--min-effect", "0.1"], "--min-effect needs --base PATH and --new PATH"),
        (["--base", str(GOLDEN)], "needs both --base PATH and --new PATH"),
        (["--base", str(GOLDEN), "--new", str(GOLDEN), str(GOLDEN)], "not also as paths"),
    ],
)
def test_cli_refuses_regression_options_without_base_and_new(args: list[str], message: str) -> None:
    paths = [str(GOLDEN)] if args[0] != "--base" else []
    proc = run_bench("compare", *paths, *args)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_two_paths_show_tables_and_point_to_base_new() -> None:
    proc = run_bench("compare", str(GOLDEN), str(GOLDEN))
    assert proc.returncode == 0, proc.stderr
    assert "answers (" in proc.stdout  # the comparison's summary, not a BASE/NEW diff
    assert f"--base {GOLDEN} --new {GOLDEN}" in proc.stderr


def test_cells_from_different_machines_are_not_matched(tmp_path: Path) -> None:
    other = copy.deepcopy(_golden())
    for r in other:
        r["env"] = {**r["env"], "cpu": "Other CPU"}
    base = _write(tmp_path / "base", _golden())
    new = _write(tmp_path / "new", other)
    assert regress.diff(_golden(), other).empty
    proc = run_bench("compare", "--base", str(base), "--new", str(new))
    assert proc.returncode == 2  # nothing to compare: a usage error, not a regression (1)
    assert "same specs ran on different machines (Golden CPU x2 vs Other CPU x2)" in proc.stderr


@pytest.mark.distributed
def test_real_rerun_of_the_same_code_passes(tmp_path: Path) -> None:
    """Two real sweeps of identical code: noise must not trip the documented 25% limit."""
    sweep = [
        sys.executable,
        "-m",
        "bench",
        "run",
        "--engines",
        "ddp",
        "--workers",
        "1",
        "--models",
        "mlp",
        "--repeats",
        "3",
        "--max-steps",
        "150",
        "--warmup-steps",
        "20",
        "--seed-mode",
        "fixed",
        "--no-compare",
    ]
    for name in ("base", "new"):
        proc = subprocess.run(
            [*sweep, "--results", str(tmp_path / name)],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=ROOT,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = run_bench(
        "compare",
        *("--base", str(tmp_path / "base"), "--new", str(tmp_path / "new")),
        *("--fail", "throughput:25%"),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ddp" in proc.stdout and "runs base/new" in proc.stdout


def test_the_first_line_says_whether_anything_changed_significantly(tmp_path: Path) -> None:
    """asv's closing line, said first: unchanged sets read 'not significantly changed';
    halving ddp's throughput at 1 worker reads as one significant, worse change."""
    base = _write(tmp_path / "base", _golden())
    same = run_bench("compare", "--base", str(base), "--new", str(base))
    assert same.stdout.splitlines()[0].startswith("NOT SIGNIFICANTLY CHANGED: "), same.stdout
    slower = copy.deepcopy(_golden())
    for r in slower:
        tput = r.get("throughput")
        if r["engine"] == "ddp" and r["world_size"] == 1 and tput is not None:
            r["throughput"] = tput / 2
    new = _write(tmp_path / "new", slower)
    proc = run_bench("compare", "--base", str(base), "--new", str(new))
    first = proc.stdout.splitlines()[0]
    assert first == "CHANGED SIGNIFICANTLY: worse: ddp x1 samples/s -50.0%", proc.stdout
