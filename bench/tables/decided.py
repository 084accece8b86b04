"""Each head-to-head's one reading, and what would settle the open ones.

`Readings` reads every pair of one comparison once (bench/decide/pairs.py `decide`:
at the loop's looks where `bench run --decide-at` launched any of it, otherwise one
95% look); the throughput table's efficiency, the head to head and decided tables,
the summary's sentences and every format show that reading and no other. Also here:
the least minutes that could settle more pairs (bench/decide/bound.py), and each
cell's simulated error rates of the rule (bench/decide/simulate.py).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from bench.decide import bound, rule, simulate
from bench.decide.pairs import Pair, Sides, decide, pairs
from bench.decide.rule import DIFFERENT, EQUIVALENT, UNDECIDED, Side
from bench.measure import stats


@dataclasses.dataclass(frozen=True)
class Reading:
    """One pair, its decision and its two sides' launches."""

    pair: Pair
    decision: rule.Decision
    a: Side
    b: Side

    @property
    def estimate(self) -> stats.Estimate:
        """The reading as an interval, as the tables and json keep intervals."""
        d = self.decision
        method = "welch-log-t" if d.reading == rule.ONE_LOOK else "sequential welch-log-t"
        if d.low is None:
            method = stats.TOO_FEW
        return stats.Estimate(d.ratio, d.low, d.high, min(self.a.n, self.b.n), method)

    def more(self, precision: float) -> tuple[int, int] | None:
        """Launches a side that would settle it at the loop's next looks, at the
        measured ratio and spreads; None where none would (or it is settled)."""
        if self.decision.outcome != UNDECIDED or min(self.a.n, self.b.n) < rule.MIN_SIDE:
            return None
        return rule.more_launches(self.a, self.b, precision, self.pair.scale)


class Readings:
    """Every pair of one comparison's usable launches, read once at `precision`."""

    def __init__(self, usable: pd.DataFrame, precision: float) -> None:
        self.precision = precision
        sides = Sides(usable)
        self.all = [
            Reading(p, decide(p, precision, sides), sides(p.a_rows), sides(p.b_rows))
            for p in pairs(usable)
        ]

    def efficiency(self, engine: str, workers: int) -> Reading | None:
        return next(
            (
                r
                for r in self.all
                if r.pair.what == "efficiency" and (r.pair.a, r.pair.workers) == (engine, workers)
            ),
            None,
        )

    def between(self, x: str, y: str, workers: int) -> tuple[stats.Estimate, Reading] | None:
        """x / y at `workers` as an interval (the pair reads a / b, whichever way round),
        and the reading it comes from."""
        for r in self.all:
            if r.pair.what != "head to head" or r.pair.workers != workers:
                continue
            est = r.estimate
            if (r.pair.a, r.pair.b) == (x, y):
                return est, r
            if (r.pair.a, r.pair.b) == (y, x):
                flip = stats.Estimate(
                    1 / est.value,
                    None if est.high is None else 1 / est.high,
                    None if est.low is None else 1 / est.low,
                    est.n,
                    est.method,
                )
                return flip, r
        return None


def _reading(pair: Pair, d: rule.Decision, precision: float) -> str:
    if d.outcome == EQUIVALENT:
        return f"equivalent within {precision:.0%}"
    if d.outcome == DIFFERENT and pair.what == "efficiency":
        return "below 1" if d.ratio < 1 else "above 1"
    if d.outcome == DIFFERENT:
        return "a faster" if d.ratio > 1 else "b faster"
    return UNDECIDED


def rows(readings: Readings) -> pd.DataFrame:
    """A row per pair: the ratio and interval of its reading (at its deciding or latest
    look), what it reads, how it was read, the launches and minutes it took, and for an
    undecided pair the launches a side it would need at the measured variances, and the
    minutes they would take."""
    out: list[dict[str, Any]] = []
    for r in readings.all:
        d, a, b = r.decision, r.a, r.b
        minutes = sum(s.launch_s * s.n for s in (a, b)) / 60
        more: Any = "-"
        if d.outcome == UNDECIDED and min(a.n, b.n) < rule.MIN_SIDE:
            more = f"{rule.MIN_SIDE} a side first"
        elif d.outcome == UNDECIDED:
            need = r.more(readings.precision)
            more = (
                f"{need[0]} + {need[1]} ({rule.seconds(need, a, b) / 60:.1f} min)"
                if need
                else "beyond the last look"
            )
        interval = "-" if d.low is None else f"[{d.low:.3f}, {d.high:.3f}]"
        out.append(
            {
                "workers": r.pair.workers,
                "a": r.pair.a,
                "b": r.pair.b if r.pair.what == "head to head" else "efficiency",
                "ratio": d.ratio,
                "interval": interval,
                "decided": _reading(r.pair, d, readings.precision),
                "read": "looks" if d.reading == rule.AT_LOOKS else "one look",
                "launches": f"{a.n} + {b.n}",
                "minutes": round(minutes, 1),
                "more launches": more,
            }
        )
    return pd.DataFrame(out)


@dataclasses.dataclass(frozen=True)
class Reach:
    """The head-to-heads of some comparisons: how many are decided, and for each count
    past those a lower bound on the seconds of launches more after which that many would
    be (bench/decide/bound.py); inf: not within the looks."""

    decided: int
    total: int
    more_s: list[float]  # [k]: for decided + 1 + k head-to-heads


def reach(all_readings: Iterable[Readings]) -> Reach:
    """The Reach of the head-to-heads of some comparisons. Efficiencies are left out:
    they settle early, on a cell that every worker count shares."""
    decided, total, bounds = 0, 0, []
    for readings in all_readings:
        for r in readings.all:
            if r.pair.what != "head to head":
                continue
            total += 1
            if r.decision.outcome != UNDECIDED:
                decided += 1
                continue
            if min(r.a.n, r.b.n) < rule.MIN_SIDE:
                continue  # unread yet: its sentence asks for its first launches
            bounds.append(bound.seconds_more(r.a, r.b, readings.precision, r.pair.scale))
    return Reach(decided, total, bound.least_seconds(bounds))


def reach_line(r: Reach) -> str:
    """The least more minutes for each count past the decided, in one line ("" when
    all are decided)."""
    if r.decided == r.total or not r.more_s:  # all decided, or none open is read yet
        return ""
    lead = "at the measured ratios and spreads, "
    counts = [(r.decided + 1 + k, s) for k, s in enumerate(r.more_s) if not math.isinf(s)]
    if not counts:
        return lead + "no allocation decides another head-to-head within the looks"
    parts = [f"{s / 60:.1f} for {k}" for k, s in counts]
    parts[0] = (
        f"{counts[0][1] / 60:.1f} more minutes to decide {counts[0][0]} of {r.total} head-to-heads"
    )
    line = lead + "any allocation needs at least " + ", ".join(parts)
    if counts[-1][0] < r.total:  # the counts beyond reach are the highest ones
        line += f"; {counts[-1][0] + 1} or more: not within the looks"
    return line


def error_rows(usable: pd.DataFrame, precision: float, sequences: int = 10_000) -> pd.DataFrame:
    """Each cell's simulated error rates of the sequential decision, on its own measured
    launches (bench/decide/simulate.py): an A/A pair called different, a pair at the edge
    of equivalence called equivalent, and how often an A/A pair is settled."""
    out: list[dict[str, Any]] = []
    if usable.empty:
        return pd.DataFrame()
    for (engine, workers), cell in usable.groupby(["engine", "workers"]):
        logs = np.log(cell["throughput"].astype(float).to_numpy())
        if logs.size < rule.MIN_SIDE:
            continue
        rates = simulate.simulate(logs, precision, sequences)
        out.append(
            {
                "engine": engine,
                "workers": int(workers),
                "launches": int(logs.size),
                "false different": rates.false_different,
                "false equivalent": rates.false_equivalent,
                "A/A decided": rates.aa_decided,
            }
        )
    return pd.DataFrame(out)


ERROR_KEY = (
    "error rates: 10,000 simulated sequential pairs a cell, drawn from its own launches "
    "(smoothed bootstrap); false different = an A/A pair called different; false "
    "equivalent = a pair whose true ratio is 1+P called equivalent; both at most 5% by "
    "design; A/A decided = A/A pairs settled (as equivalent) within the looks"
)

KEY = (
    "a row a pair: ratio = a / b, or a's efficiency against its own 1-worker cell; decided "
    "at +-P (bench run/compare --decide-at, 5% unless set): the ratio's interval "
    "excludes 1 (a or b faster; an efficiency below 1), or lies inside [1-P, 1+P] "
    "(equivalent); the intervals hold "
    f"at {rule.confidence():.2%} at each of the looks taken at "
    f"{', '.join(map(str, rule.LOOKS))} launches of the pair, so that stopping "
    "when decided stays within 5% wrong decisions; interval: at the deciding (or latest) "
    "look; more launches: a + b to add at the measured variances, and the minutes they "
    "would take at the pair's launch costs; beyond the last look: at the measured ratio "
    "and spread, even the last look would not decide it (bench run --decide-at still "
    "launches it while a ratio and spreads a standard error more favourable would) "
    "(docs/methodology.md#decided-not-only-measured)"
)
