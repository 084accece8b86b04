"""scripts/decide_vs_fixed.py: the pairs each run settled, read back from the committed
comparison (results/reference/decide-vs-fixed-2026-12-03) and checked against scipy's
Welch interval on the records' own throughputs; and the two runs cut at the same minutes."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from bench.analysis import decisions
from bench.analysis.frame import synced_launches
from bench.measure import sequential
from tests.conftest import ROOT, script

EXPERIMENT = ROOT / "results" / "reference" / "decide-vs-fixed-2026-12-03"


def _logs(run: str, model: str, engine: str, workers: int) -> np.ndarray:  # run: passN/what
    out = []
    for line in (EXPERIMENT / run / "runs.jsonl").read_text().splitlines():
        r = json.loads(line)
        same = (r["status"], r["spec"]["model"], r["engine"], r["world_size"])
        if same == ("ok", model, engine, workers) and r["spec"]["grad_sync"]:
            out.append(math.log(r["throughput"]))
    return np.array(out)


@pytest.mark.parametrize("run", ["pass1/decide", "pass1/fixed", "pass2/fixed", "pass2/decide"])
def test_each_head_to_heads_fixed_n_interval_is_welchs_on_its_records(
    monkeypatch: pytest.MonkeyPatch, run: str
) -> None:
    scipy_stats = pytest.importorskip("scipy.stats")  # scikit-learn's dependency: always here
    table = script("decide_vs_fixed", monkeypatch).settled(synced_launches(EXPERIMENT / run))
    heads = table[table["what"] == "head to head"]
    assert len(heads) == 12
    for _, row in heads.iterrows():
        pair, workers = row["pair"].rsplit(" x", 1)
        a, b = (_logs(run, row["model"], e, int(workers)) for e in pair.split(" / "))
        assert row["launches"] == f"{a.size} + {b.size}"
        ci = scipy_stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
        low, high = math.exp(ci.low), math.exp(ci.high)
        assert row["ratio [fixed-n 95%]"].endswith(f"[{low:.3f}, {high:.3f}]")
        expected = (
            "different" if high < 1 or low > 1 else "equivalent" if low >= 0.95 and high <= 1.05
            else "undecided"
        )  # fmt: skip
        assert row["fixed-n 95%"] == expected


def _settled_by_welch(scipy_stats: Any, records: list[dict[str, Any]]) -> int:
    """Head-to-heads a fixed-n 95% Welch interval settles at +-5% over these records."""
    logs: dict[tuple[str, int, str], list[float]] = {}
    for r in records:
        cell = (r["spec"]["model"], r["world_size"], r["engine"])
        logs.setdefault(cell, []).append(math.log(r["throughput"]))
    settled = 0
    for (model, workers, a), (model_b, workers_b, b) in itertools.combinations(sorted(logs), 2):
        if (model, workers) != (model_b, workers_b):
            continue
        test = scipy_stats.ttest_ind(
            logs[model, workers, a], logs[model, workers, b], equal_var=False
        )
        ci = test.confidence_interval(0.95)
        low, high = math.exp(ci.low), math.exp(ci.high)
        settled += high < 1 or low > 1 or (low >= 0.95 and high <= 1.05)
    return settled


def _ok_records(run: str) -> list[dict[str, Any]]:
    lines = (EXPERIMENT / run / "runs.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["status"] == "ok" and r["spec"]["grad_sync"]]


def _launch_seconds(r: dict[str, Any]) -> float:
    return float(r.get("launch_to_exit_s") or r["launch_to_stop_s"])


def _loop_settled(launches: pd.DataFrame) -> int:
    """Head-to-heads the loop's own rule settles on these launches."""
    count = 0
    for _, g in launches.groupby("model"):
        ok = decisions.usable(g)
        sides = decisions.Sides(ok)
        for pair in decisions.pairs(ok):
            if pair.what == "head to head":
                count += decisions.decide(ok, pair, 0.05, sides).outcome != "undecided"
    return count


def test_fixed_repeats_meet_the_loop_at_the_same_minutes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each row's fixed sweep is its first r rounds (it runs round by round), their
    minutes the launches' own seconds, their count Welch's; the loop's cut is its
    launches within those minutes, counted from the records, and its count the loop's
    rule on exactly those."""
    scipy_stats = pytest.importorskip("scipy.stats")
    mod = script("decide_vs_fixed", monkeypatch)
    table = mod.same_minutes(EXPERIMENT / "pass1")
    ok = _ok_records("pass1/fixed")
    per_round = len({(r["spec"]["model"], r["engine"], r["world_size"]) for r in ok})
    assert per_round == 12
    assert table["fixed repeats"].tolist() == list(range(3, len(ok) // per_round + 1))
    loop_ends = list(itertools.accumulate(map(_launch_seconds, _ok_records("pass1/decide"))))
    loop = synced_launches(EXPERIMENT / "pass1" / "decide")
    for _, row in table.iterrows():
        first = ok[: row["fixed repeats"] * per_round]
        minutes = sum(map(_launch_seconds, first)) / 60
        assert row["minutes of launches"] == pytest.approx(minutes, abs=0.051)
        want = _settled_by_welch(scipy_stats, first)
        assert row["fixed: settled (fixed-n 95%)"] == f"{want} of 12"
        made = sum(end / 60 <= minutes for end in loop_ends)
        assert row["loop launches by then"] == made
        settled = _loop_settled(loop.iloc[:made])
        assert row["loop: settled at its looks, same minutes"] == f"{settled} of 12"


@pytest.mark.parametrize("run", ["pass1/decide", "pass2/decide"])
def test_the_even_split_replayed_look_by_look_is_the_loops_own_decision(
    monkeypatch: pytest.MonkeyPatch, run: str
) -> None:
    """scripts/spending_check.py takes each look alone at its share of alpha: at the even
    share that must be the loop's decision, pair by pair."""
    mod = script("spending_check", monkeypatch)
    even = mod.splits()["even (the loop's)"]
    df = synced_launches(EXPERIMENT / run)
    seen = 0
    for _, g in df.groupby("model"):
        ok = decisions.usable(g)
        sides = decisions.Sides(ok)
        for pair in decisions.pairs(ok):
            whole = decisions.decide(ok, pair, 0.05, sides).outcome
            assert mod.first_deciding(ok, pair, sides, even) == whole
            seen += 1
    assert seen == 18  # 12 head-to-heads and 6 efficiencies
    # the first round, three launches a cell: only the first look can see it, at 95%
    # with the whole alpha against 99.4% with an eighth, so it settles more
    first_round = df.iloc[:36]
    assert first_round.groupby(["engine", "model", "workers"]).size().tolist() == [3] * 12
    first_only = [1.0] + [0.0] * (len(even) - 1)
    assert mod.settled(first_round, first_only) > mod.settled(first_round, even)


@pytest.mark.parametrize(("looks", "constant"), [((1, 2), 2.178), ((1, 2, 3, 4, 5), 2.413)])
def test_pococks_level_is_the_textbook_constant_for_equal_looks(
    monkeypatch: pytest.MonkeyPatch, looks: tuple[int, ...], constant: float
) -> None:
    """Pocock's C_P(K, 0.05), two-sided, equally spaced looks (Jennison and Turnbull,
    Group Sequential Methods, table 2.1); the suite's looks lie between one and Bonferroni."""
    mod = script("spending_check", monkeypatch)
    assert mod.pocock_level(200_000, looks) == pytest.approx(
        1 - math.erfc(constant / 2**0.5), abs=3e-4
    )
    ours = mod.pocock_level(200_000)
    assert 0.95 < ours < 1 - 0.05 / 8


def test_a_round_left_short_by_a_failed_launch_ends_the_fixed_rounds(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Rounds past one with a launch missing are no sweep of r repeats: the list stops."""
    mod = script("decide_vs_fixed", monkeypatch)
    lines = (EXPERIMENT / "pass1" / "fixed" / "runs.jsonl").read_text().splitlines()
    whole = [r for r, _, _ in mod.fixed_rounds(EXPERIMENT / "pass1")]
    assert whole == [3, 4, 5, 6]
    fourth = [k for k, line in enumerate(lines) if json.loads(line)["labels"]["repeat"] == 3]
    (tmp_path / "fixed").mkdir()
    kept = lines[: fourth[5]] + lines[fourth[5] + 1 :]  # one launch of round 4 missing
    (tmp_path / "fixed" / "runs.jsonl").write_text("\n".join(kept) + "\n")
    assert [r for r, _, _ in mod.fixed_rounds(tmp_path)] == [3]


def test_pococks_level_keeps_alpha_only_at_an_even_split(monkeypatch: pytest.MonkeyPatch) -> None:
    """Simulated A/A pairs run to the last look: at an even split Pocock's level misses
    about 5%, as built; split as shared cells split the loop's launches it misses more,
    while Bonferroni's stays under 5% either way."""
    mod = script("spending_check", monkeypatch)
    pocock, bonferroni = mod.pocock_level(200_000), sequential.confidence()
    assert mod.aa_false_different(pocock, 0.5) == pytest.approx(0.05, abs=0.006)
    assert mod.aa_false_different(pocock, 0.19) > 0.055
    for share in (0.5, 0.19):
        assert mod.aa_false_different(bonferroni, share) < 0.05
