"""`bench run --decide-at P [--budget TIME]`: launches added until head-to-heads are decided.

After the sweep's first round (its repeats, three at least), each round re-reads the
records, decides every pair as `bench compare` does (bench/decide/) and
launches one more run for each model with an undecided pair: the pair closest to a
decision in seconds (at the measured variances; a pair only within reach at more
favourable ones comes after every other), on its side that narrows the interval most
per second. A pair that no allocation within the looks could decide, even at a
ratio and spreads a standard error more favourable than measured
(`rule.GIVE_UP_Z`), gets nothing: it would swallow the budget and decide nothing.
Nor does a pair whose launches, even at those values, would cost more than the budget
has left: the minutes go to a pair they can still settle.
Rounds interleave the models and, pair by pair, the engines, so the machine's drift
spreads over every side. It stops when nothing more can be decided or the next round
would overrun the budget.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple, TextIO

import pandas as pd

from bench import records
from bench.contract.spec import RunSpec
from bench.core.units import clock
from bench.decide import pairs, rule
from bench.sweep.cells import Cell, plan
from bench.sweep.config import SweepConfig
from bench.sweep.execute import CellResult
from bench.tables import decided
from bench.tables.frame import synced_launches

MAX_FAILURES = 3  # a cell that keeps failing would be chosen again and again
RunCells = Callable[[list[Cell] | None], list[CellResult]]


@dataclasses.dataclass(frozen=True)
class Choice:
    cell: Cell
    pair: str
    seconds: float  # what the launch is expected to cost


class Round(NamedTuple):
    chosen: list[Choice]  # one launch per model with a pair that can still be decided
    decided: int
    total: int
    past_budget: int  # undecided pairs within reach of a look, but not of the budget left


def _ok_synced(results: Path, config: SweepConfig) -> pd.DataFrame:
    """The sweep's ok, synchronised launches, in record order: this machine's latest
    comparison group of each model (a results folder may hold other specs or machines)."""
    df = synced_launches(results)
    if df.empty:
        return df
    engines = {e.value for e in config.engines}
    keep = (
        df["engine_name"].isin(engines)
        & df["workers"].isin(config.workers)
        & df["model"].isin(config.models)
    )
    df = df[keep]
    latest = df.groupby("model")["group"].last()
    return df[df["group"].isin(latest.values)]


def _cell_for(templates: list[Cell], variant: str, workers: int, gdf: pd.DataFrame) -> Cell:
    """The next launch of the cell whose launches show as `variant` at `workers` (a new
    repeat, with its seed where seeds vary)."""
    done = gdf[(gdf["engine"] == variant) & (gdf["workers"] == workers)]
    engine, label, model = done.iloc[0][["engine_name", "aa", "model"]]
    template = next(
        c
        for c in templates
        if (c.engine.value, c.label, c.workers, c.spec.model) == (engine, label, workers, model)
    )
    repeat = 1 + max([int(r) for r in done["repeat"] if r is not None] or [template.repeat])
    if template.seed_mode != "vary":
        return dataclasses.replace(template, repeat=repeat)
    seed = template.spec.seed + repeat - template.repeat
    return dataclasses.replace(template, repeat=repeat, spec=template.spec.replace(seed=seed))


def choose(
    ok: pd.DataFrame, templates: list[Cell], precision: float, left_s: float = math.inf
) -> Round:
    """One launch per model with an undecided pair that can still be decided within the
    looks and the `left_s` seconds of budget, and the counts of pairs."""
    chosen, decided, total, past_budget = [], 0, 0, 0
    for _, gdf in ok.groupby("model", sort=True):
        # (only hopeful, seconds): a pair within reach at its measured values comes before
        # one that is only at more favourable values, whose launches would be too few
        best: tuple[tuple[bool, float], Choice] | None = None
        sides = pairs.Sides(gdf)
        for pair in pairs.pairs(gdf):
            total += 1
            d = pairs.decide(pair, precision, sides)
            if d.outcome != rule.UNDECIDED:
                decided += 1
                continue
            a, b = sides(pair.a_rows), sides(pair.b_rows)
            # the launches at the measured ratio and spreads; where those put every look
            # (or the budget) out of reach, at more favourable ones a few launches cannot
            # rule out
            need = rule.more_launches(a, b, precision, pair.scale)
            hopeful = need is None or rule.seconds(need, a, b) > left_s
            if hopeful:
                need = rule.more_launches(a, b, precision, pair.scale, optimism=rule.GIVE_UP_Z)
            if need is None:
                continue
            if rule.seconds(need, a, b) > left_s:
                past_budget += 1
                continue
            key = (hopeful, rule.seconds(need, a, b))
            side = rule.next_side(a, b)
            if side == "a":
                engine, workers, launch_s = pair.a, pair.workers, a.launch_s
            else:  # an efficiency's other side is the 1-worker cell
                workers = 1 if pair.what == "efficiency" else pair.workers
                engine, launch_s = pair.b, b.launch_s
            cell = _cell_for(templates, engine, workers, gdf)
            if best is None or key < best[0]:
                best = (key, Choice(cell, pair.name, launch_s))
        if best is not None:
            chosen.append(best[1])
    return Round(chosen, decided, total, past_budget)


def _why_none(decided: int, total: int, past_budget: int, left_s: float) -> str:
    """Why a round chose no launch."""
    if decided == total:
        return "every pair decided"
    if past_budget:
        # the premise is said, as the reach line that follows takes the measured values
        return (
            f"no more can be decided within the budget: {past_budget} would need more "
            f"than the {clock(max(left_s, 0.0))} left, even at ratios and spreads a "
            "standard error more favourable than measured"
        )
    return "no more can be decided within the looks"


def _say_reach(ok: pd.DataFrame, precision: float, say: TextIO) -> None:
    """What any allocation would need to decide more of the run's head-to-heads."""
    line = decided.reach_line(
        decided.reach(decided.Readings(g, precision) for _, g in ok.groupby("model"))
    )
    if line:
        print(f"bench run --decide-at: {line}", file=say, flush=True)


def run(
    config: SweepConfig,
    base: RunSpec,
    results: Path,
    precision: float,
    budget_s: float | None,
    run_cells: RunCells,
    out: TextIO | None = None,
) -> list[CellResult]:
    """The first round, then rounds of chosen launches until decided or out of budget."""
    say = out or sys.stdout
    start = time.monotonic()
    first = dataclasses.replace(config, repeats=max(config.repeats, rule.MIN_SIDE))
    outcomes = run_cells(plan(first, base))
    templates = [c for c in plan(dataclasses.replace(first, repeats=1), base) if c.spec.grad_sync]
    failures = 0
    while True:
        ok = _ok_synced(results, config)
        spent = time.monotonic() - start
        left_s = math.inf if budget_s is None else budget_s - spent
        chosen, decided, total, past_budget = choose(ok, templates, precision, left_s)
        status = f"{decided} of {total} pairs decided at +-{precision:.0%} after {clock(spent)}"
        if not chosen:
            why = _why_none(decided, total, past_budget, left_s)
            print(f"bench run --decide-at: {status}; {why}", file=say, flush=True)
            _say_reach(ok, precision, say)
            return outcomes
        cost = sum(c.seconds for c in chosen)
        if budget_s is not None and spent + cost > budget_s:
            print(
                f"bench run --decide-at: {status}; the budget ({clock(budget_s)}) is spent",
                file=say,
                flush=True,
            )
            _say_reach(ok, precision, say)
            return outcomes
        print(
            f"bench run --decide-at: {status}; next: "
            + ", ".join(
                f"{c.cell.engine.value} x{c.cell.workers} {c.cell.spec.model} ({c.pair})"
                for c in chosen
            ),
            file=say,
            flush=True,
        )
        ran = run_cells([c.cell for c in chosen])
        outcomes += ran
        failures += sum(o.status != records.Status.OK for o in ran)
        if failures >= MAX_FAILURES:
            print(
                f"bench run --decide-at: {status}; stopped after {failures} failed launches "
                "(their logs say why)",
                file=say,
            )
            _say_reach(_ok_synced(results, config), precision, say)
            return outcomes
