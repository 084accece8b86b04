"""Advice the machine can take: what a verdict suggests, checked against the run's layout.

A suggestion that adds threads or workers is made only where the layout
(bench/tables/derived.py: workers x (threads + the engine's communication
threads) against the usable CPUs) still fits with them; on a machine they already
fill the advice is the other way: fewer workers per node, a core left for
communication, or a larger batch. An engine's own communication knobs are
suggested only where communication is the cause. Each suggestion says which way it
should move the step, and quotes `bench tune` where it measured the knob.
"""

from __future__ import annotations

import dataclasses

from bench import engines
from bench.tables.derived import Layout, base_engine


@dataclasses.dataclass(frozen=True)
class Advice:
    """One thing to try: how it changes the layout, and what it should do to the step."""

    what: str
    expect: str
    workers: int = 0  # workers per node it adds (negative: removes)
    threads: int = 0  # threads per worker it adds (negative: removes)

    def text(self) -> str:
        return f"{self.what} ({self.expect})"


def _comm_knobs(engine: str) -> str:
    try:
        return engines.get(base_engine(engine)).comm_knobs
    except ValueError:  # an engine no longer registered
        return "a larger --bucket-mb"


def _fewer(layout: Layout, why: str) -> list[Advice]:
    """Take a worker per node or a thread per worker away, where there is one to take."""
    out = []
    if layout.workers > 1:
        out.append(
            Advice(f"{layout.workers - 1} per node instead of {layout.workers}", why, workers=-1)
        )
    if layout.threads > 1:
        out.append(Advice(f"--threads {layout.threads - 1}", why, threads=-1))
    return out


def _more_threads(layout: Layout, expect: str) -> list[Advice]:
    if layout.changed(threads=1).fits():
        return [Advice(f"--threads {layout.threads + 1}", expect, threads=1)]
    return []


LARGER_BATCH = Advice(
    "a larger --batch-size per worker",
    "the per-step cost is spread over more samples: samples/s up",
)


def _communication(layout: Layout, engine: str, tuned: str | None) -> list[Advice]:
    knobs = Advice(
        _comm_knobs(engine),
        "fewer, larger or smaller messages: less time waiting per step"
        + (f"; bench tune measured {tuned}" if tuned else ""),
    )
    amortise = Advice(
        "a larger --batch-size per worker",
        "the same gradient bytes for more samples: the wait per sample shrinks",
    )
    return [knobs, amortise]


def _comm_cpu(layout: Layout, engine: str, tuned: str | None) -> list[Advice]:
    full = not layout.fits()
    why = "a core left for communication: its threads stop taking compute's CPU"
    out = _fewer(layout, why) if full else []
    return [*out, LARGER_BATCH]


def _stretched(layout: Layout, engine: str, tuned: str | None) -> list[Advice]:
    if not layout.fits():
        why = f"{layout.text()} exceed the CPUs: each worker's compute shares cores"
        return [*_fewer(layout, why), LARGER_BATCH]
    return [
        Advice(
            "fewer workers per node, or pin each worker to its cores",
            "workers that fit the CPUs still share caches and memory bandwidth",
            workers=-1 if layout.workers > 1 else 0,
        )
    ]


def _compute(layout: Layout, engine: str, tuned: str | None) -> list[Advice]:
    more = _more_threads(layout, "more cores for each worker's maths: faster compute")
    lower = Advice("--precision fp16/bf16 where the hardware has it", "less work per sample")
    if more:
        return [*more, lower]
    return [lower, Advice("a machine with more cores per worker", f"{layout.text()} is full")]


def _overhead(layout: Layout, engine: str, tuned: str | None) -> list[Advice]:
    return [LARGER_BATCH]


def _contended(layout: Layout, engine: str, tuned: str | None) -> list[Advice]:
    alone = Advice("run alone on the machine", "others' CPU time no longer counts against it")
    if layout.oversubscribed:
        return [*_fewer(layout, "no more compute threads than CPUs"), alone]
    return [alone]


def _straggler(layout: Layout, engine: str, tuned: str | None) -> list[Advice]:
    find = Advice(
        "find what slows that rank (its host, its data, its neighbours)",
        "every rank waits for the slowest at each collective",
    )
    return [find, *_fewer(layout, "a rank sharing cores is slowed by its neighbours")]


def _input(layout: Layout, engine: str, tuned: str | None) -> list[Advice]:
    cheaper = Advice(
        "cheaper input: pre-staged or cached data, less augmentation",
        "batches ready before the step needs them",
    )
    if layout.changed(threads=1).fits():
        return [cheaper, Advice("a loader worker", "batches built beside the step", threads=1)]
    return [cheaper]


def _optimizer(layout: Layout, engine: str, tuned: str | None) -> list[Advice]:
    return [
        Advice(
            "a fused (foreach) optimizer, or fewer parameter tensors",
            "the optimizer's per-tensor cost grew with the workers sharing the machine",
        )
    ]


def _nothing(layout: Layout, engine: str, tuned: str | None) -> list[Advice]:
    return []


def _twin(layout: Layout, engine: str, tuned: str | None) -> list[Advice]:
    return [
        Advice(
            "bench run without --no-comm-cost",
            "its compute-only twin tells compute from waiting for collectives",
        )
    ]


RULES = {
    "straggler": _straggler,
    "input-bound": _input,
    "CPU-contended": _contended,
    "communication-bound": _communication,
    "comm-CPU-bound": _comm_cpu,
    "compute-stretched": _stretched,
    "optimizer-bound": _optimizer,
    "overhead-bound": _overhead,
    "compute-bound": _compute,
    "scales": _nothing,
    "undetermined": _twin,
}


def advise(cause: str, layout: Layout, engine: str, tuned: str | None = None) -> list[Advice]:
    """What to try for a verdict `cause` on a run laid out as `layout` (never more threads
    or workers than `layout` leaves CPUs for)."""
    return RULES[cause](layout, engine, tuned)
