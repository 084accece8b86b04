"""The head-to-heads of one comparison, and each one's decision from its launches.

The pairs: every two engines at the same worker count (their throughput ratio), and
every engine at n workers against its own 1-worker cell (its efficiency). Each is
decided by the rule of bench/decide/rule.py, its looks replayed in the order the
launches were recorded, so `bench compare` says what `bench run --decide-at` saw when
it stopped. The launches come in as a frame of usable launches (one row each, in record
order: bench/tables/frame.py `usable`), with engine, workers, single_node_engine,
throughput and launch_s columns.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pandas as pd

from bench.decide import rule
from bench.decide.rule import Side

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


def decide(pair: Pair, precision: float, sides: Sides) -> rule.Decision:
    """The pair's sequential decision, its looks replayed in launch order."""
    # record order is launch order: the frame keeps the order records were appended
    on_a = set(pair.a_rows)
    order = ["a" if i in on_a else "b" for i in sorted({*pair.a_rows, *pair.b_rows})]
    return rule.decide(sides(pair.a_rows), sides(pair.b_rows), order, precision, pair.scale)
