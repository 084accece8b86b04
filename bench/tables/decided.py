"""The decided table: each head-to-head's decision, what would settle the open ones, and
each cell's simulated error rates of the rule (bench/decide/)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from bench.decide import bound, rule, simulate
from bench.decide.pairs import Pair, Sides, decide, pairs
from bench.decide.rule import DIFFERENT, EQUIVALENT, UNDECIDED


def _reading(pair: Pair, d: rule.Decision, precision: float) -> str:
    if d.outcome == EQUIVALENT:
        return f"equivalent within {precision:.0%}"
    if d.outcome == DIFFERENT and pair.what == "efficiency":
        return "below 1" if d.ratio < 1 else "above 1"
    if d.outcome == DIFFERENT:
        return "a faster" if d.ratio > 1 else "b faster"
    return UNDECIDED


def rows(usable: pd.DataFrame, precision: float) -> pd.DataFrame:
    """A row per pair: the ratio and interval at its deciding (or latest) look, what it
    reads, the launches and minutes it took, and for an undecided pair the launches a
    side it would need at the measured variances, and the minutes they would take."""
    out: list[dict[str, Any]] = []
    sides = Sides(usable)
    for pair in pairs(usable):
        d = decide(pair, precision, sides)
        a, b = sides(pair.a_rows), sides(pair.b_rows)
        minutes = sum(s.launch_s * s.n for s in (a, b)) / 60
        more: Any = "-"
        if d.outcome == UNDECIDED and min(a.n, b.n) < rule.MIN_SIDE:
            more = f"{rule.MIN_SIDE} a side first"
        elif d.outcome == UNDECIDED:
            need = rule.more_launches(a, b, precision, pair.scale)
            more = (
                f"{need[0]} + {need[1]} ({rule.seconds(need, a, b) / 60:.1f} min)"
                if need
                else "beyond the last look"
            )
        interval = "-" if d.low is None else f"[{d.low:.3f}, {d.high:.3f}]"
        out.append(
            {
                "workers": pair.workers,
                "a": pair.a,
                "b": pair.b if pair.what == "head to head" else "efficiency",
                "ratio": d.ratio,
                "interval": interval,
                "decided": _reading(pair, d, precision),
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


def reach(usable_frames: Iterable[pd.DataFrame], precision: float) -> Reach:
    """The Reach of the head-to-heads in each of `usable_frames` (one comparison's usable
    launches each). Efficiencies are left out: they settle early, on a cell that every
    worker count shares."""
    decided, total, bounds = 0, 0, []
    for usable in usable_frames:
        sides = Sides(usable)
        for pair in pairs(usable):
            if pair.what != "head to head":
                continue
            total += 1
            if decide(pair, precision, sides).outcome != UNDECIDED:
                decided += 1
                continue
            a, b = sides(pair.a_rows), sides(pair.b_rows)
            bounds.append(bound.seconds_more(a, b, precision, pair.scale))
    return Reach(decided, total, bound.least_seconds(bounds))


def reach_rows(r: Reach) -> pd.DataFrame:
    """A row for each count of head-to-heads beyond those decided: the least minutes
    more in which any allocation could decide that many (None: none could, within the
    looks)."""
    return pd.DataFrame(
        {
            "head-to-heads decided": f"{r.decided + 1 + k} of {r.total}",
            "more minutes": None if math.isinf(s) else round(s / 60, 1),
        }
        for k, s in enumerate(r.more_s)
    )


def reach_line(r: Reach) -> str:
    """The least more minutes for each count past the decided, in one line ("" when
    all are decided)."""
    if r.decided == r.total:
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


REACH_KEY = (
    "at the measured ratios and spreads taken as true, the least minutes of launches more "
    "in which any allocation decides that many head-to-heads: the k-th smallest of the open "
    "pairs' own bounds, each the cheapest whole split of a look to come whose interval, at "
    "the least t quantile that look can have, would be narrow enough (a lower bound, "
    "never a plan); '-': at no look (docs/methodology.md#what-would-settle-the-rest)"
)


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
