"""scripts/perf_table.py: the gate's calibration tables, from kept launches or their CSV."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import script


def _gate_run(folder: Path, slowdown: float, pairs: int, seed: int) -> None:
    """What one gate run keeps: a JSON report a launch, two benchmarks and the calibration."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    for k in range(pairs):
        for side, scale in (("base", 1.0), ("new", 1.0 + slowdown)):
            step = 1e-3 * scale * rng.lognormal(0, 0.01)
            load = 0.08 * rng.lognormal(0, 0.01)
            (folder / f"{side}-{k}.json").write_text(json.dumps({"benchmarks": [
                {"name": "test_train_step[ddp-mlp]", "stats": {"data": [step * 1.3, step]}},
                {"name": "test_load_records", "stats": {"data": [load]}},
                {"name": "test_calibration", "stats": {"data": [1e-4]}},
            ]}))  # fmt: skip


def test_tables_replay_each_gate_run_and_the_csv_gives_them_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    perf_table = script("perf_table", monkeypatch)
    _gate_run(tmp_path / "out" / "same-1", 0.0, 4, seed=1)
    _gate_run(tmp_path / "out" / "slow-1", 0.3, 4, seed=2)
    (tmp_path / "out" / "same-1.log").write_text("not a gate run's folder\n")
    csv = tmp_path / "minima.csv"
    monkeypatch.setattr(sys, "argv", ["perf_table", str(tmp_path / "out"), "--csv", str(csv)])
    assert perf_table.main() == 0
    table = capsys.readouterr().out
    assert "| same 1 | 4 | pass |  |" in table
    assert "| slow 1 | 4 | FAIL | test_train_step[ddp-mlp] |" in table
    assert "| test_train_step[ddp-mlp] |" in table and "| 0/1 | 1/1 |" in table
    assert "test_calibration |" not in table  # the machine's drift, never a benchmark
    rows = csv.read_text().splitlines()
    assert rows[0] == "kind,run,side,pair,benchmark,min_s" and len(rows) == 1 + 2 * 2 * 4 * 3
    monkeypatch.setattr(sys, "argv", ["perf_table", "--from-csv", str(csv)])
    assert perf_table.main() == 0
    assert capsys.readouterr().out == table


def test_a_folder_without_gate_runs_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    perf_table = script("perf_table", monkeypatch)
    monkeypatch.setattr(sys, "argv", ["perf_table", str(tmp_path)])
    with pytest.raises(SystemExit, match="no gate runs found"):
        perf_table.main()


def test_the_counts_table_replays_each_run_and_gives_each_benchmarks_spread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    perf_table = script("perf_table", monkeypatch)
    runs = {
        "same-1": ({"load": 1000, "compare": 5000}, {"load": 1001, "compare": 4990}),
        "same-2": ({"load": 1002, "compare": 5000}, {"load": 1001, "compare": 5010}),
        "more-compare-1": ({"load": 1000, "compare": 5005}, {"load": 1001, "compare": 5255}),
    }
    for name, (base, new) in runs.items():
        (tmp_path / "out" / name).mkdir(parents=True)
        (tmp_path / "out" / name / "counts.json").write_text(json.dumps({"base": base, "new": new}))
    csv = tmp_path / "counts.csv"
    monkeypatch.setattr(
        sys, "argv", ["perf_table", str(tmp_path / "out"), "--counts-csv", str(csv)]
    )
    assert perf_table.main() == 0
    table = capsys.readouterr().out
    assert "| gate run | compare | load | counted verdict |" in table
    assert "| same 1 | -0.20% | +0.10% | pass |" in table
    assert "| more-compare 1 | +5.00% | +0.10% | FAIL: compare |" in table
    # the injected run's new compare is not in compare's spread; its base, and its load, are
    assert "| compare | new | 2 | 4,990 | 5,010 | 0.401% |" in table
    assert "| compare | base | 3 | 5,000 | 5,005 | 0.100% |" in table
    assert "| load | new | 3 | 1,001 | 1,001 | 0.000% |" in table
    monkeypatch.setattr(sys, "argv", ["perf_table", "--from-counts-csv", str(csv)])
    assert perf_table.main() == 0
    assert capsys.readouterr().out == table
