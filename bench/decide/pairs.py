"""The head-to-heads of one comparison, and each one's decision from its launches.

The pairs: every two engines at the same worker count (their throughput ratio), and
every engine at n workers against its own 1-worker cell (its efficiency). Each pair
gets one reading, which every table, sentence and format shows. Launches that
`bench run --decide-at` added (their records carry its precision) are read by the rule
of bench/decide/rule.py, its looks replayed in the order the launches were recorded, so
`bench compare` says what the loop saw when it stopped: that reading stays valid
however the loop stopped. Fixed repeats, whose number nothing chose from the data, are
read all at once with one look at 95% (Welch's interval on log throughput around the
ratio of medians, as bench/measure/stats.py `ratio`). The launches come in as a frame
of usable launches (one row each, in record order: bench/tables/frame.py `usable`),
with engine, workers, single_node_engine, throughput, launch_s and decide_at columns.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pandas as pd

from bench.decide import rule
from bench.decide.rule import Side
from bench.measure import stats

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


def pairs(usable: pd.DataFrame) -> list[Pair]:
    """Every head-to-head and efficiency pair among one comparison's usable launches."""
    if usable.empty:
        return []
    cells = {k: tuple(g.index) for k, g in usable.groupby(["engine", "workers"])}
    where = {
        e: e[len(s) :] for e, s in zip(usable["engine"], usable["single_node_engine"], strict=True)
    }
    out = []
    for workers in sorted({int(w) for _, w in cells}):
        engines = sorted(e for e, w in cells if w == workers)
        for a, b in itertools.combinations(engines, 2):
            if where[a] != where[b]:  # engines over different links or nodes: no pair
                continue
            out.append(Pair("head to head", workers, a, b, cells[a, workers], cells[b, workers]))
    for (engine, workers), rows in sorted(cells.items()):
        single = usable.loc[list(rows), "single_node_engine"].iloc[0]
        if workers > 1 and (single, 1) in cells:
            base = cells[single, 1]
            out.append(Pair("efficiency", workers, engine, single, rows, base, float(workers)))
    return out


class Sides:
    """Each cell's Side, made once from one comparison's usable launches (a pair's cells
    are shared with other pairs, and compare reads many records)."""

    def __init__(self, usable: pd.DataFrame) -> None:
        self._tput = dict(zip(usable.index, usable["throughput"].astype(float), strict=True))
        self._launch = dict(zip(usable.index, usable["launch_s"], strict=True))
        looped = usable["decide_at"].notna() if "decide_at" in usable else None
        self._looped = set() if looped is None else set(usable.index[looped])
        self._made: dict[tuple[int, ...], Side] = {}

    def at_looks(self, pair: Pair) -> bool:
        """Whether the loop launched any of the pair's launches: then they are read at its
        looks (valid whatever made it stop), else with one look."""
        return not self._looped.isdisjoint((*pair.a_rows, *pair.b_rows))

    def __call__(self, rows: tuple[int, ...]) -> Side:
        if rows not in self._made:
            launch = [self._launch[i] for i in rows]
            costs = [float(s) for s in launch if isinstance(s, int | float) and s > 0]
            self._made[rows] = Side(
                tuple(math.log(self._tput[i]) for i in rows),
                float(np.median(costs)) if costs else DEFAULT_LAUNCH_S,
            )
        return self._made[rows]


def decide(pair: Pair, precision: float, sides: Sides) -> rule.Decision:
    """The pair's one reading: at the loop's looks, replayed in launch order, where the
    loop launched any of it; otherwise one 95% look over all its launches."""
    a, b = sides(pair.a_rows), sides(pair.b_rows)
    if sides.at_looks(pair):
        # record order is launch order: the frame keeps the order records were appended
        on_a = set(pair.a_rows)
        order = ["a" if i in on_a else "b" for i in sorted({*pair.a_rows, *pair.b_rows})]
        return rule.decide(a, b, order, precision, pair.scale)
    est = stats.ratio(np.exp(a.logs), np.exp(b.logs), pair.scale)
    outcome = rule.UNDECIDED
    if est.low is not None and est.high is not None:
        outcome = rule.outcome(est.low, est.high, precision)
    return rule.Decision(
        outcome, est.value, est.low, est.high, int(est.low is not None), a.n + b.n,
        stats.CONFIDENCE, rule.ONE_LOOK,
    )  # fmt: skip
