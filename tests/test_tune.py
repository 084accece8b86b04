"""bench tune: successive halving within a budget, and the fresh best-against-best runs."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from bench import records
from bench.contract.spec import RunSpec
from bench.engines import Engine
from bench.records import Status
from bench.sweep import tune
from bench.sweep.cells import Cell
from bench.sweep.config import SweepConfig
from bench.sweep.execute import CellResult
from bench.tables import compare, tuning
from tests.conftest import run_bench


class _Scripted(tune.Tuner):
    """A tuner whose launches return a throughput from the cell's knobs, one second each
    on a fake clock: the halving and the budget are tested without timing anything."""

    speed: dict[float, float | None]
    launched: list[tuple[float, str, int | None]]
    now: float = 0.0

    def launch(self, cell: Cell, labels: dict[str, Any]) -> CellResult:
        self.launched.append((cell.spec.bucket_mb, labels["tuning"], cell.spec.max_steps))
        self.now += 1.0
        self.run_s.append(1.0)
        tput = self.speed[cell.spec.bucket_mb]
        status = Status.OK if tput is not None else Status.FAILED
        return CellResult(cell, status, 1.0, Path("."), None, tput)

    def elapsed(self) -> float:
        return self.now


def _tuner(budget_s: float, speed: dict[float, float | None]) -> _Scripted:
    config = SweepConfig.from_dict({"engines": ["ddp"], "workers": [2], "models": ["mlp"]})
    t = _Scripted(config, RunSpec(model="mlp", max_steps=200), Path("."), budget_s, 40, 2,
                  out=io.StringIO())  # fmt: skip
    t.speed, t.launched = speed, []
    return t


def test_halving_keeps_the_faster_half_doubling_the_steps_until_one_is_left() -> None:
    # DDP's grid: bucket 1, 5, 25 (the default), 100 MB
    t = _tuner(1e6, {1.0: 10.0, 5.0: 30.0, 25.0: 20.0, 100.0: 25.0})
    best, trials = tune.halve(t, Engine.DDP, until_s=1e6)
    assert best == {"bucket_mb": 5.0} and trials == 4 + 2
    steps = [s for _, _, s in t.launched]
    assert steps == [40] * 4 + [80] * 2
    assert [b for b, _, _ in t.launched][4:] == [5.0, 100.0]


def test_failed_trials_are_out_and_a_spent_budget_keeps_the_default() -> None:
    t = _tuner(1e6, {1.0: None, 5.0: None, 25.0: 20.0, 100.0: None})
    assert tune.halve(t, Engine.DDP, until_s=1e6)[0] == {"bucket_mb": 25.0}
    t = _tuner(1e6, {1.0: None, 5.0: None, 25.0: None, 100.0: None})
    assert tune.halve(t, Engine.DDP, until_s=1e6) == ({"bucket_mb": 25.0}, 4)
    # four trials of a second each do not fit in three seconds: nothing runs
    t = _tuner(1e6, {1.0: 50.0, 5.0: 30.0, 25.0: 20.0, 100.0: 25.0})
    t.run_s = [1.0]
    assert tune.halve(t, Engine.DDP, until_s=3.0) == ({"bucket_mb": 25.0}, 0)


def test_the_fresh_runs_are_alternated_and_set_aside_from_the_search_budget() -> None:
    t = _tuner(20.0, {1.0: 10.0, 5.0: 30.0, 25.0: 20.0, 100.0: 25.0})
    t.run_s = [1.0]  # runs take a second: 4 fresh ones set aside leave 16 s to search
    (found,) = tune.tune(t, [Engine.DDP])
    roles = [(b, role) for b, role, _ in t.launched if role != "trial"]
    # 2 repeats x (default, tuned), alternated, at the fresh runs' 200 steps
    assert roles == [(25.0, "default"), (found.tuned["bucket_mb"], "tuned")] * 2
    assert all(s == 200 for _, role, s in t.launched if role != "trial")
    # rung 0 (4 trials) and rung 1 (2) fit in the 16 s left; one candidate is left
    assert found.trials == 6 and found.tuned == {"bucket_mb": 5.0}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workers", "1"], "--workers >= 2"),
        (["--repeats", "1"], "--repeats >= 2"),
        (["--trial-steps", "3"], "must exceed the 5 warm-up steps"),
        (["--budget-min", "0"], "--budget-min must be > 0"),
        (["--engines", "nope"], "nope"),
    ],
)
def test_bad_tuning_requests_are_refused_by_name(
    tmp_path: Path, args: list[str], message: str
) -> None:
    proc = run_bench("tune", "--results", str(tmp_path), *args)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert not records.results_file(tmp_path).exists()


@pytest.mark.distributed
def test_a_real_tuning_records_its_trials_and_the_fresh_runs_side_by_side(tmp_path: Path) -> None:
    proc = run_bench("tune", "--engines", "ddp", "--workers", "2", "--model", "mlp",
                     "--budget-min", "2", "--repeats", "2", "--trial-steps", "10",
                     "--max-steps", "30", "--epochs", "1", "--target-ci", "0",
                     "--profile-steps", "0", "--results", str(tmp_path), timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    recs = records.load([tmp_path]).records
    roles = [r["labels"]["tuning"] for r in recs]
    assert roles.count("default") == roles.count("tuned") == 2 and roles.count("trial") >= 1
    (row,) = tuning.rows(recs).to_dict("records")
    assert row["engine"] == "ddp" and row["default knobs"] == "bucket_mb=25"
    assert row["trials"] == roles.count("trial") and "best against best" in proc.stdout
    # trials are a search, not a measurement: the comparison tables leave them out
    shown = sum(len(c.run_ids) for c in compare.compare(recs))
    assert shown == 4
