"""scripts/paired_check.py: head-to-heads replayed paired and unpaired over the same
blocks, checked against scipy on the committed lever baseline (12 repeats a cell),
whose records are parsed here without the suite's loaders."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from bench.analysis.decisions import Pair
from bench.measure import sequential
from tests.conftest import ROOT, script

BASELINE = ROOT / "results" / "reference" / "levers-2026-12-03" / "baseline"


def _by_repeat(engine: str, workers: int) -> dict[int, float]:
    out = {}
    for line in (BASELINE / "runs.jsonl").read_text().splitlines():
        r = json.loads(line)
        if (r["status"], r["engine"], r["world_size"]) == ("ok", engine, workers):
            out[r["labels"]["repeat"]] = math.log(r["throughput"])
    return out


def _first_deciding(intervals: list[tuple[int, float, float]], blocks: int) -> str:
    for k, low, high in intervals:
        if high < 1 or low > 1:
            return f"different at {k}"
        if low >= 0.95 and high <= 1.05:
            return f"equivalent at {k}"
    return f"undecided at {blocks}"  # no look decided: every block was spent


def test_each_pair_is_decided_at_scipys_intervals_on_its_blocks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scipy_stats = pytest.importorskip("scipy.stats")  # scikit-learn's dependency: always here
    check = script("paired_check", monkeypatch)
    table = check.replay(BASELINE)
    assert len(table) == 6  # three engines, two worker counts: mlp only
    conf = 1 - 0.05 / 8
    for _, row in table.iterrows():
        pair, workers = row["pair"].rsplit(" x", 1)
        a_all, b_all = (_by_repeat(e, int(workers)) for e in pair.split(" / "))
        common = sorted(set(a_all) & set(b_all))
        a = np.array([a_all[r] for r in common])
        b = np.array([b_all[r] for r in common])
        assert row["blocks"] == len(common) == 12
        looks = [k for k in (3, 5, 7, 10, 14, 21, 32, 47) if k <= a.size]
        paired, unpaired = [], []
        for k in looks:
            ci = scipy_stats.ttest_rel(a[:k], b[:k]).confidence_interval(conf)
            paired.append((k, math.exp(ci.low), math.exp(ci.high)))
            ci = scipy_stats.ttest_ind(a[:k], b[:k], equal_var=False).confidence_interval(conf)
            unpaired.append((k, math.exp(ci.low), math.exp(ci.high)))
        assert row["paired"] == _first_deciding(paired, a.size)
        assert row["unpaired"] == _first_deciding(unpaired, a.size)
        sd = np.std(a - b, ddof=1) / math.sqrt(np.var(a, ddof=1) + np.var(b, ddof=1))
        assert row["sd paired/unpaired"] == pytest.approx(sd)
        assert row["ratio"] == pytest.approx(math.exp(np.mean(a) - np.mean(b)))


def test_blocks_match_by_repeat_and_leave_out_a_repeat_launched_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    check = script("paired_check", monkeypatch)
    ok = pd.DataFrame(
        {
            "repeat": [0, 1, 2, 2, 3, 0, 1, 2, 4],
            "throughput": [10.0, 11.0, 12.0, 13.0, 14.0, 20.0, 21.0, 22.0, 24.0],
        }
    )
    pair = Pair("head to head", 1, "x", "y", (0, 1, 2, 3, 4), (5, 6, 7, 8))
    a, b = check.blocks(ok, pair)
    # repeat 2 is ambiguous on side x, 3 and 4 are on one side only
    assert np.allclose(np.exp(a), [10.0, 11.0]) and np.allclose(np.exp(b), [20.0, 21.0])


def test_a_shared_drift_is_decided_sooner_paired(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks whose two launches share a large machine phase and differ by 3%: the paired
    interval cancels the phase; the unpaired one is swamped by it."""
    check = script("paired_check", monkeypatch)
    rng = np.random.default_rng(3)
    phase = rng.normal(0, 0.15, 14)
    a = phase + math.log(1.03) + rng.normal(0, 0.005, 14)
    b = phase + rng.normal(0, 0.005, 14)
    assert check.decided_at(a, b, paired=True) == (sequential.DIFFERENT, 5)
    assert check.decided_at(a, b, paired=False) == (sequential.UNDECIDED, 14)
