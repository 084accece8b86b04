"""The regression gate's verdict (scripts/perfgate.py), on launches made up here."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT

if str(ROOT / "scripts") not in sys.path:  # the gate is a developer tool, not in the package
    sys.path.append(str(ROOT / "scripts"))
import perfgate


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
    assert not change.regressed
    assert change.outcome in (perfgate.OK, perfgate.UNDECIDED)
    speed = perfgate.machine_speed(base, new)
    assert speed is not None and 0.9 < speed.value < 1.1


def test_a_real_slowdown_is_caught_and_its_interval_shown(tmp_path: Path) -> None:
    base = _side(tmp_path, "b", 1.0, [1.0, 1.03, 0.98])
    new = _side(tmp_path, "n", 1.3, [1.01, 0.99, 1.02])
    (change,) = perfgate.changes(base, new)
    assert change.regressed, change
    assert change.ratio.low is not None and change.ratio.high is not None
    assert change.ratio.low > 1.10 and 1.2 < change.ratio.value < 1.4
    table = perfgate.render([change], None, 0.95)
    assert "REGRESSED" in table and "n=3" in table and "[95.0% CI]" in table


def test_launches_are_the_unit(tmp_path: Path) -> None:
    """Thousands of rounds in two launches give no verdict: drift between launches is the
    uncertainty, and two launches cannot measure it."""
    base = _side(tmp_path, "b", 1.0, [1.0, 1.0])
    new = _side(tmp_path, "n", 1.3, [1.0, 1.0])
    (change,) = perfgate.changes(base, new)
    assert change.ratio.low is None and not change.regressed
    assert change.outcome == perfgate.UNDECIDED
    assert change.rounds == (80, 80)


def test_a_baseline_from_another_machine_is_not_compared(tmp_path: Path) -> None:
    a = _launch(tmp_path, "a", {"t": [1.0]}, cpu="EPYC")
    b = _launch(tmp_path, "b", {"t": [1.0]}, cpu="Xeon")
    assert perfgate.same_machine(a.machine, a.machine)
    assert not perfgate.same_machine(a.machine, b.machine)


# -- the sequential A/B gate: launch pairs, looks, alpha spent over them ---------------


def _pairs(
    phases: list[float], slowdown: float, pair_sd: float, seed: int = 0
) -> tuple[list[perfgate.Launch], list[perfgate.Launch]]:
    """Launch pairs on a machine whose speed changes by phase (shared by a pair's two
    launches), each launch with its own luck of sd `pair_sd` on top; one benchmark."""
    rng = np.random.default_rng(seed)
    base: list[perfgate.Launch] = []
    new: list[perfgate.Launch] = []
    for i, phase in enumerate(phases):
        for side, scale, out in (("b", 1.0, base), ("n", 1.0 + slowdown, new)):
            t = 1e-3 * phase * scale * rng.lognormal(0, pair_sd)
            rounds = {"test_step": [t, 1.2 * t], "test_calibration": [1e-4 * phase]}
            out.append(perfgate.Launch(Path(f"{side}{i}"), {}, rounds))
    return base, new


SLOW_PHASES = [1.0, 2.5, 1.1, 2.2, 0.9, 3.0, 1.0, 2.8, 1.2, 2.0, 1.0, 2.6, 1.1, 2.4, 0.9, 3.0]


def test_pairs_cancel_the_machines_phases() -> None:
    """Train-step minima moved 1.5 -> 2-4.5 ms in a slow phase of this VM: launches made in
    pairs share it, so identical code is decided within +10% at the first look, where an
    unpaired interval over the same launches cannot tell."""
    base, new = _pairs(SLOW_PHASES, 0.0, 0.02)
    (change,) = perfgate.sequential_changes(base, new)
    assert change.outcome == perfgate.OK and change.ratio.n == perfgate.LOOKS[0], change
    assert perfgate.settled([change])
    (unpaired,) = perfgate.changes(base, new)
    assert unpaired.outcome == perfgate.UNDECIDED, unpaired
    speed = perfgate.machine_speed(base, new, pairs=True)
    assert speed is not None and speed.value == pytest.approx(1.0)


def test_a_slowdown_is_decided_at_a_look_and_stays_decided() -> None:
    base, new = _pairs(SLOW_PHASES, 0.18, 0.02, seed=3)
    (change,) = perfgate.sequential_changes(base, new)
    assert change.regressed and change.ratio.low is not None and change.ratio.low > 1.10
    assert change.ratio.n in perfgate.LOOKS  # decided by a look, not by all 16 pairs
    assert "REGRESSED" in perfgate.render([change], None, perfgate.confidence())
    assert perfgate.settled([change])


def test_a_noisy_machine_leaves_the_gate_undecided_not_failed() -> None:
    base, new = _pairs(SLOW_PHASES[:6], 0.10, 0.15, seed=1)
    (change,) = perfgate.sequential_changes(base, new)
    assert change.outcome == perfgate.UNDECIDED and not change.regressed
    assert not perfgate.settled([change])
    assert "undecided" in change.verdict()


def test_between_looks_nothing_is_decided() -> None:
    """Five pairs: the look at four pairs could not decide, and five is no look, so even
    an interval that now lies above +10% is not a verdict."""
    base, new = _pairs([1.0] * 5, 0.0, 0.01)
    later = [perfgate.Launch(n.path, n.machine, {"test_step": [v * 1.5 for v in n.rounds["test_step"]]})
             for n in new[4:]]  # fmt: skip
    noisy = [perfgate.Launch(n.path, n.machine, {"test_step": [v * f for v in n.rounds["test_step"]]})
             for n, f in zip(new[:4], [1.0, 1.6, 0.8, 1.5], strict=True)]  # fmt: skip
    (change,) = perfgate.sequential_changes(base, noisy + later, looks=(4, 6))
    assert change.outcome == perfgate.UNDECIDED and change.ratio.n == 5


def test_unchanged_code_fails_the_gate_at_most_alpha_over_all_looks() -> None:
    """Identical sides, threshold 0 (any slowdown for certain counts), stopped at the first
    look that decides: the share of gates that fail is within alpha / 2, one-sided, although
    five looks were taken; each look at 95% instead would fail several times as often."""
    gates, failed, naive = 600, 0, 0
    for seed in range(gates):
        base, new = _pairs([1.0] * 16, 0.0, 0.05, seed=seed)
        (change,) = perfgate.sequential_changes(base, new, threshold=0.0)
        failed += change.regressed
        (loose,) = perfgate.sequential_changes(base, new, threshold=0.0, alpha=0.05 * 5)
        naive += loose.regressed
    assert failed / gates <= 0.025 + 0.02, failed
    assert naive > 2 * max(failed, 3), (naive, failed)
