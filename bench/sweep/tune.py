"""`bench tune`: each engine's best communication settings within a budget, then measured
afresh against its defaults (best against best).

The knobs searched leave the maths unchanged: how gradients are grouped into
collectives (DDP's bucket size, Horovod's fusion threshold, Paddle's comm buffer, all
`bucket_mb`) and how often Horovod's background thread looks for ready tensors (its
cycle time). A comparison of defaults is unfair to whichever engine ships worse ones.

Search: successive halving over each engine's grid. Every candidate runs once at the
trial length; the faster half runs again at twice the length, and so on until one is
left or the budget would be spent. The grids are small (3 to 6 candidates), so the
halving is written out here rather than taken from a search library whose pruners act
inside one process's trial, where each of these trials is a launched job. Every trial
is an ordinary record labelled tuning=trial. Then the default and the winner run
`repeats` fresh times each, alternated (tuning=default / tuning=tuned): only these are
compared, so the winner's lucky trial (the winner's curse) never counts.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from bench import engines
from bench.contract.spec import RunSpec
from bench.core.errors import SweepError
from bench.engines import Engine
from bench.sweep.cells import Cell, check_plan
from bench.sweep.config import SweepConfig
from bench.sweep.execute import CellResult, environment_key, run_cell


def knobs_text(knobs: dict[str, Any]) -> str:
    shown = {k: ("default" if v is None else f"{v:g}") for k, v in knobs.items()}
    return ", ".join(f"{k}={v}" for k, v in shown.items())


def default_knobs(engine: Engine, base: RunSpec) -> dict[str, Any]:
    first = engines.get(engine).tune_grid[0]
    return {k: (base.bucket_mb if k == "bucket_mb" else None) for k in first}


def candidates(engine: Engine, base: RunSpec) -> list[dict[str, Any]]:
    """The grid, with the default settings always among the candidates."""
    grid = [dict(point) for point in engines.get(engine).tune_grid]
    default = default_knobs(engine, base)
    return grid if default in grid else [default, *grid]


@dataclasses.dataclass
class Tuner:
    """One tuning session: its settings, its clock, and how it launches a run."""

    config: SweepConfig
    base: RunSpec  # the spec every run shares; tuning changes only the knobs above
    results: Path
    budget_s: float
    trial_steps: int
    repeats: int
    out: TextIO | None = None  # None: sys.stdout as it is when printing
    tune_id: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex[:8])
    start: float = dataclasses.field(default_factory=time.monotonic)
    runs: int = 0
    run_s: list[float] = dataclasses.field(default_factory=list)

    def cell(
        self, engine: Engine, knobs: dict[str, Any], steps: int | None, i: int, trial: bool = False
    ) -> Cell:
        """A run of `engine` with `knobs`; a trial is ranked by throughput only: no profiling."""
        spec = self.base.replace(bucket_mb=knobs["bucket_mb"], max_steps=steps)
        measure = self.config.measure_flags() + (("--profile-steps", "0") if trial else ())
        options = tuple(self.config.options(engine))
        # every knob but the bucket is an engine option; None leaves the engine's default
        options += tuple(
            f"{k}={v:g}" for k, v in knobs.items() if k != "bucket_mb" and v is not None
        )
        workers = self.config.workers[0]
        return Cell(engine, workers, spec, i, "fixed", options, measure=measure)

    def launch(self, cell: Cell, labels: dict[str, Any]) -> CellResult:
        self.runs += 1
        run_dir = self.results / "runs" / f"tune-{self.tune_id}"
        res = run_cell(
            cell,
            self.runs,
            self.results,
            run_dir,
            self.config.timeout,
            environment_key(),
            f"tune-{self.tune_id}",
            extra_labels={"tune": self.tune_id, **labels},
        )
        self.run_s.append(res.seconds)
        return res

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def mean_s(self) -> float:
        """A run's seconds so far (12 before any: a small model's launch on 2 cores)."""
        return sum(self.run_s) / len(self.run_s) if self.run_s else 12.0

    def say(self, text: str) -> None:
        print(text, file=sys.stdout if self.out is None else self.out, flush=True)


def halve(t: Tuner, engine: Engine, until_s: float) -> tuple[dict[str, Any], int]:
    """Successive halving over `engine`'s candidates, each rung started only if it can end
    by `until_s` on the tuner's clock: (the winner, trials run). A failed trial is out;
    with no rung run, or every trial failed, the default stands."""
    default = default_knobs(engine, t.base)
    alive, steps, rung, trials = candidates(engine, t.base), t.trial_steps, 0, 0
    while len(alive) > 1:
        if t.elapsed() + len(alive) * t.mean_s() > until_s:
            kept = "the default stands" if rung == 0 else f"the best of rung {rung - 1} stands"
            t.say(f"  {engine.value}: its share of the budget is spent; {kept}")
            return (default if rung == 0 else alive[0]), trials
        scores = []
        for knobs in alive:
            res = t.launch(
                t.cell(engine, knobs, steps, rung, trial=True),
                {"tuning": "trial", "rung": rung, "knobs": knobs_text(knobs)},
            )
            trials += 1
            t.say(
                f"  {engine.value} rung {rung} ({steps} steps) {knobs_text(knobs)}: "
                + (f"{res.throughput:,.0f} samples/s" if res.throughput else str(res.status))
            )
            if res.throughput is not None:
                scores.append((res.throughput, knobs))
        if not scores:
            t.say(f"  {engine.value}: every trial of rung {rung} failed; the default stands")
            return default, trials
        scores.sort(key=lambda s: s[0], reverse=True)
        alive = [k for _, k in scores[: math.ceil(len(scores) / 2)]]
        steps, rung = steps * 2, rung + 1
    return alive[0], trials


@dataclasses.dataclass(frozen=True)
class Found:
    engine: Engine
    tuned: dict[str, Any]  # the winning knobs
    trials: int


def tune(t: Tuner, engines: Sequence[Engine]) -> list[Found]:
    """Search every engine, then the fresh repeats; returns one summary per engine.

    Each engine's search gets an equal share of what the budget leaves once the fresh
    repeats (estimated from the runs so far) are set aside, so no engine's search is
    cut short by the order of --engines."""
    probe = [t.cell(e, k, t.trial_steps, 0) for e in engines for k in candidates(e, t.base)]
    unavailable = check_plan(probe, t.config)
    if unavailable:
        missing = ", ".join(f"{e.value} ({why})" for e, why in unavailable.items())
        raise SweepError(f"bench tune: cannot run {missing}")
    out = []
    for n, engine in enumerate(engines):
        fresh = 2 * t.repeats * len(engines) * t.mean_s()
        share = (t.budget_s - fresh - t.elapsed()) / (len(engines) - n)
        best, trials = halve(t, engine, t.elapsed() + share)
        out.append(Found(engine, best, trials))
        t.say(f"  {engine.value}: {knobs_text(best)} after {trials} trials")
    for item in out:
        engine, default = item.engine, default_knobs(item.engine, t.base)
        for repeat in range(t.repeats):  # alternated, so drift hits both alike
            for role, knobs in (("default", default), ("tuned", item.tuned)):
                res = t.launch(
                    t.cell(engine, knobs, t.base.max_steps, repeat),
                    {"tuning": role, "knobs": knobs_text(knobs)},
                )
                t.say(f"  fresh {engine.value} {role} ({knobs_text(knobs)}): {res.status}")
    return out
