"""The regression gate's verdict (bench/analysis/perfgate.py), on launches made up here."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bench.analysis import perfgate


def _launch(
    tmp_path: Path, name: str, times: dict[str, list[float]], cpu: str = "EPYC"
) -> perfgate.Launch:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({
        "machine_info": {"node": "n", "processor": "x86_64", "cpu": {"brand_raw": cpu}},
        "benchmarks": [{"name": k, "stats": {"data": v}} for k, v in times.items()],
    }))  # fmt: skip
    return perfgate.Launch.read(path)


def _side(tmp_path: Path, side: str, scale: float, drift: list[float]) -> list[perfgate.Launch]:
    rng = np.random.default_rng(len(side))
    out = []
    for i, d in enumerate(drift):  # each launch: its own machine state, then round noise
        rounds = (1e-3 * scale * d * rng.lognormal(0, 0.05, 40)).tolist()
        cal = (1e-4 * d * rng.lognormal(0, 0.05, 40)).tolist()
        out.append(_launch(tmp_path, f"{side}{i}", {"test_step": rounds, "test_calibration": cal}))
    return out


def test_unchanged_code_under_drift_is_not_a_regression(tmp_path: Path) -> None:
    # the machine drifts by 8% between launches, alike for both sides (alternated)
    base = _side(tmp_path, "b", 1.0, [1.0, 1.08, 0.97])
    new = _side(tmp_path, "n", 1.0, [1.06, 0.99, 1.03])
    (change,) = perfgate.changes(base, new)
    assert change.name == "test_step"  # the calibration is never a benchmark
    assert not change.regressed(0.10) and change.verdict(0.10) == "ok"
    speed = perfgate.machine_speed(base, new)
    assert speed is not None and 0.9 < speed.value < 1.1


def test_a_real_slowdown_is_caught_and_its_interval_shown(tmp_path: Path) -> None:
    base = _side(tmp_path, "b", 1.0, [1.0, 1.03, 0.98])
    new = _side(tmp_path, "n", 1.3, [1.01, 0.99, 1.02])
    (change,) = perfgate.changes(base, new)
    assert change.regressed(0.10), change
    assert change.ratio.low is not None and change.ratio.high is not None
    assert change.ratio.low > 1.10 and 1.2 < change.ratio.value < 1.4
    table = perfgate.render([change], 0.10, None)
    assert "REGRESSED" in table and "n=3" in table


def test_launches_are_the_unit(tmp_path: Path) -> None:
    """Thousands of rounds in two launches give no verdict: drift between launches is the
    uncertainty, and two launches cannot measure it."""
    base = _side(tmp_path, "b", 1.0, [1.0, 1.0])
    new = _side(tmp_path, "n", 1.3, [1.0, 1.0])
    (change,) = perfgate.changes(base, new)
    assert change.ratio.low is None and not change.regressed(0.10)
    assert change.rounds == (80, 80)


def test_a_baseline_from_another_machine_is_not_compared(tmp_path: Path) -> None:
    a = _launch(tmp_path, "a", {"t": [1.0]}, cpu="EPYC")
    b = _launch(tmp_path, "b", {"t": [1.0]}, cpu="Xeon")
    assert perfgate.same_machine(a.machine, a.machine)
    assert not perfgate.same_machine(a.machine, b.machine)
