"""Which head-to-heads are settled: each pair's sequential decision, from the records.

The pairs of one comparison: every two engines at the same worker count (their
throughput ratio), and every engine at n workers against its own 1-worker cell (its
efficiency). Each is decided by bench/measure/sequential.py, replaying its looks in the
order the launches were recorded, so `bench compare` says what `bench run --decide-at`
saw when it stopped.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from bench.measure import reach as bound
from bench.measure import sequential
from bench.measure.sequential import DIFFERENT, EQUIVALENT, UNDECIDED, Side

DEFAULT_PRECISION = 0.05
DEFAULT_LAUNCH_S = 10.0  # a launch's cost where no record says (older records)


@dataclasses.dataclass(frozen=True)
class Pair:
    what: str  # "head to head" | "efficiency"
    workers: int
    a: str  # engine (cell) on top of the ratio
    b: str  # engine (cell) below; for efficiency, the same engine at 1 worker
    a_rows: tuple[int, ...]  # frame index of each side's launches, in record order
    b_rows: tuple[int, ...]
    scale: float = 1.0

    @property
    def name(self) -> str:
        if self.what == "efficiency":
            return f"{self.a} x{self.workers} efficiency"
        return f"{self.a} / {self.b} x{self.workers}"


def usable(ok: pd.DataFrame) -> pd.DataFrame:
    """The launches a ratio can use: a finite, positive throughput (a damaged record's
    may be anything)."""
    if ok.empty or "throughput" not in ok:
        return ok.iloc[0:0]
    tput = pd.to_numeric(ok["throughput"], errors="coerce")
    return ok[np.isfinite(tput) & (tput > 0)]


def pairs(ok: pd.DataFrame) -> list[Pair]:
    """Every head-to-head and efficiency pair among one comparison's ok, synced launches."""
    ok = usable(ok)
    if ok.empty:
        return []
    cells = {k: tuple(g.index) for k, g in ok.groupby(["engine", "workers"])}
    where = {e: e[len(s) :] for e, s in zip(ok["engine"], ok["single_node_engine"], strict=True)}
    out = []
    for workers in sorted({int(w) for _, w in cells}):
        engines = sorted(e for e, w in cells if w == workers)
        for a, b in itertools.combinations(engines, 2):
            if where[a] != where[b]:  # engines over different links or nodes: no pair
                continue
            out.append(Pair("head to head", workers, a, b, cells[a, workers], cells[b, workers]))
    for (engine, workers), rows in sorted(cells.items()):
        single = ok.loc[list(rows), "single_node_engine"].iloc[0]
        if workers > 1 and (single, 1) in cells:
            base = cells[single, 1]
            out.append(Pair("efficiency", workers, engine, single, rows, base, float(workers)))
    return out


class Sides:
    """Each cell's Side, made once from one comparison's ok launches (a pair's cells are
    shared with other pairs, and compare reads many records)."""

    def __init__(self, ok: pd.DataFrame) -> None:
        self._tput = dict(zip(ok.index, ok["throughput"].astype(float), strict=True))
        self._launch = dict(zip(ok.index, ok["launch_s"], strict=True))
        self._made: dict[tuple[int, ...], Side] = {}

    def __call__(self, rows: tuple[int, ...]) -> Side:
        if rows not in self._made:
            launch = [self._launch[i] for i in rows]
            costs = [float(s) for s in launch if isinstance(s, int | float) and s > 0]
            self._made[rows] = Side(
                tuple(math.log(self._tput[i]) for i in rows),
                float(np.median(costs)) if costs else DEFAULT_LAUNCH_S,
            )
        return self._made[rows]


def side(ok: pd.DataFrame, rows: tuple[int, ...]) -> Side:
    return Sides(ok.loc[list(rows)])(rows)


def decide(
    ok: pd.DataFrame,
    pair: Pair,
    precision: float,
    sides: Sides | None = None,
    trim: float = sequential.TRIM,
    alpha: float = sequential.ALPHA,
    looks: Sequence[int] = sequential.LOOKS,
) -> sequential.Decision:
    """The pair's sequential decision, its looks replayed in launch order (`trim`,
    `alpha`, `looks`: as bench.measure.sequential takes them; its defaults are the
    loop's)."""
    made = sides or Sides(ok)
    a, b = made(pair.a_rows), made(pair.b_rows)
    # record order is launch order: the frame keeps the order records were appended
    on_a = set(pair.a_rows)
    order = ["a" if i in on_a else "b" for i in sorted({*pair.a_rows, *pair.b_rows})]
    return sequential.decide(a, b, order, precision, pair.scale, alpha, looks, trim)


def _reading(pair: Pair, d: sequential.Decision, precision: float) -> str:
    if d.outcome == EQUIVALENT:
        return f"equivalent within {precision:.0%}"
    if d.outcome == DIFFERENT and pair.what == "efficiency":
        return "below 1" if d.ratio < 1 else "above 1"
    if d.outcome == DIFFERENT:
        return "a faster" if d.ratio > 1 else "b faster"
    return UNDECIDED


def _more(need: tuple[int, int], a: Side, b: Side) -> str:
    """Launches a side to add, and the minutes they would take at each side's launch cost
    (what a --budget must leave for the pair alone)."""
    minutes = (need[0] * a.launch_s + need[1] * b.launch_s) / 60
    return f"{need[0]} + {need[1]} ({minutes:.1f} min)"


def rows(ok: pd.DataFrame, precision: float) -> pd.DataFrame:
    """A row per pair: the ratio and interval at its deciding (or latest) look, what it
    reads, the launches and minutes it took, and for an undecided pair the launches a
    side it would need at the measured variances, and the minutes they would take."""
    out: list[dict[str, Any]] = []
    ok = usable(ok)
    sides = Sides(ok)
    for pair in pairs(ok):
        d = decide(ok, pair, precision, sides)
        a, b = sides(pair.a_rows), sides(pair.b_rows)
        minutes = sum(s.launch_s * s.n for s in (a, b)) / 60
        more: Any = "-"
        if d.outcome == UNDECIDED and min(a.n, b.n) < sequential.MIN_SIDE:
            more = f"{sequential.MIN_SIDE} a side first"
        elif d.outcome == UNDECIDED:
            need = sequential.more_launches(a, b, precision, pair.scale)
            more = _more(need, a, b) if need else "beyond the last look"
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
    """The head-to-heads of some comparisons: how many are decided, and for k = 0 .. total
    a lower bound on the seconds of launches after which k would be decided, at the
    measured ratios and spreads (bench.measure.reach): `more_s` on top of the launches
    made, `all_s` in all, from the first MIN_SIDE launches of every cell. inf: not
    within the looks; None: not computed (a group of pairs too large to try)."""

    decided: int
    total: int
    more_s: list[float] | None
    all_s: list[float] | None


def reach(frames: Iterable[pd.DataFrame], precision: float) -> Reach:
    """The Reach of the head-to-heads in each of `frames` (one comparison's ok launches
    each). Efficiencies are left out: their 1-worker cells tie every worker count of a
    model into one group too large to try subset by subset, and they settle early."""
    cells: list[Side] = []
    index: dict[tuple[int, tuple[int, ...]], int] = {}
    now: list[bound.Open] = []  # the undecided pairs
    every: list[bound.Open] = []  # all of them, for the bound from the first launches
    decided = 0

    def cell(frame: int, rows: tuple[int, ...], side: Side) -> int:
        if (frame, rows) not in index:
            index[frame, rows] = len(cells)
            cells.append(side)
        return index[frame, rows]

    for k, frame in enumerate(frames):
        ok = usable(frame)
        sides = Sides(ok)
        for pair in pairs(ok):
            if pair.what != "head to head":
                continue
            a = cell(k, pair.a_rows, sides(pair.a_rows))
            b = cell(k, pair.b_rows, sides(pair.b_rows))
            every.append(bound.open_pair(cells, a, b, precision))
            if decide(ok, pair, precision, sides).outcome == UNDECIDED:
                now.append(every[-1])
            else:
                decided += 1
    total = len(every)
    more = bound.least_more(cells, now)
    first = [min(c.n, sequential.MIN_SIDE) for c in cells]
    from_first = bound.least_more(cells, every, first)
    paid = sum(c.launch_s * n for c, n in zip(cells, first, strict=True))
    return Reach(
        decided,
        total,
        None if more is None else [0.0] * decided + more,
        None if from_first is None else [paid + s for s in from_first],
    )


def reach_rows(r: Reach) -> pd.DataFrame:
    """A row for each count of head-to-heads beyond those decided: the least minutes
    more, and in all, in which any allocation could decide that many (None: none could,
    within the looks)."""
    if r.decided == r.total:
        return pd.DataFrame()
    if r.more_s is None or r.all_s is None:
        return pd.DataFrame(
            [{"head-to-heads decided": f"{r.decided} of {r.total}", **NOT_COMPUTED}]
        )

    def minutes(s: float) -> float | None:
        return None if math.isinf(s) else round(s / 60, 1)

    return pd.DataFrame(
        {
            "head-to-heads decided": f"{k} of {r.total}",
            "more minutes": minutes(r.more_s[k]),
            "minutes in all": minutes(r.all_s[k]),
        }
        for k in range(r.decided + 1, r.total + 1)
    )


def reach_line(r: Reach) -> str:
    """The least more minutes for each count past the decided, in one line ("" when
    all are decided)."""
    if r.decided == r.total:
        return ""
    lead = "at the measured ratios and spreads, "
    if r.more_s is None:
        return lead + "the least minutes to decide more were " + NOT_COMPUTED["more minutes"]
    counts = range(r.decided + 1, r.total + 1)
    reachable = [k for k in counts if not math.isinf(r.more_s[k])]
    if not reachable:
        return lead + "no allocation decides another head-to-head within the looks"
    parts = [f"{r.more_s[k] / 60:.1f} for {k}" for k in reachable]
    parts[0] = (
        f"{r.more_s[reachable[0]] / 60:.1f} more minutes to decide {reachable[0]} of "
        f"{r.total} head-to-heads"
    )
    line = lead + "any allocation needs at least " + ", ".join(parts)
    if reachable[-1] < r.total:  # the counts beyond reach are the highest ones
        line += f"; {reachable[-1] + 1} or more: not within the looks"
    return line


NOT_COMPUTED = {
    "more minutes": (
        f"not computed: more than {bound.MAX_GROUP_PAIRS} open pairs share cells at one "
        "worker count"
    )
}
REACH_KEY = (
    "at the measured ratios and spreads taken as true, the least minutes of launches in "
    "which any allocation decides that many head-to-heads (a lower bound: whole launches, "
    "a look only at its count and t quantiles wider than the last look's add to it); "
    "more: on top of the launches made; in all: from "
    f"{sequential.MIN_SIDE} launches a cell, those included, at the spreads of all the "
    "launches; '-': at no look (docs/methodology.md#what-would-settle-the-rest)"
)


def error_rows(ok: pd.DataFrame, precision: float, sequences: int = 10_000) -> pd.DataFrame:
    """Each cell's simulated error rates of the sequential decision, on its own measured
    launches (bench.measure.sequential.simulate): an A/A pair called different, a pair at
    the edge of equivalence called equivalent, and how often an A/A pair is settled."""
    out: list[dict[str, Any]] = []
    ok = usable(ok)
    if ok.empty:
        return pd.DataFrame()
    for (engine, workers), cell in ok.groupby(["engine", "workers"]):
        logs = np.log(cell["throughput"].astype(float).to_numpy())
        if logs.size < sequential.MIN_SIDE:
            continue
        rates = sequential.simulate(logs, precision, sequences)
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
    f"at {sequential.confidence():.2%} at each of the looks taken at "
    f"{', '.join(map(str, sequential.LOOKS))} launches of the pair, so that stopping "
    "when decided stays within 5% wrong decisions; interval: at the deciding (or latest) "
    "look; more launches: a + b to add at the measured variances, and the minutes they "
    "would take at the pair's launch costs; beyond the last look: at the measured ratio "
    "and spread, even the last look would not decide it (bench run --decide-at still "
    "launches it while a ratio and spreads a standard error more favourable would) "
    "(docs/methodology.md#decided-not-only-measured)"
)
