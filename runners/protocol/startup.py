"""Start-up time: from the launcher's start to the first timed step, in phases.

Users at scale lose minutes before the first step; which part is the engine's is
what a comparison must show. Each rank marks wall-clock instants (time.time(), one
clock for every process on a host; across hosts as good as their clock sync) as it
passes the boundaries below; the process's own start comes from the OS. At the end
every rank's marks are gathered and the record keeps the phases of the rank that
reached its first timed step last (the run starts when all of them have).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import psutil

from bench.records.types import RunFields

# (phase, the mark it ends at), in order; each starts where the previous ended
PHASES = (
    ("launcher", "process"),  # the sweep's launch to this worker process existing
    ("interpreter and imports", "imported"),  # Python, the runner, the framework
    ("data", "data"),  # the dataset loaded and checked
    ("process group", "group"),  # the engine's initialisation (rendezvous included)
    ("harness set-up", "recorded"),  # the record's environment (CPU, git, libraries)
    ("build and broadcast", "built"),  # the model from the shared weights, engine wrap
    ("warm-up steps", "first_timed"),  # first-step compilation or autotuning included
)


class Clock:
    """This rank's marks; the first call of each name counts."""

    def __init__(self) -> None:
        self.marks: dict[str, float] = {}

    def mark(self, name: str) -> None:
        self.marks.setdefault(name, time.time())

    def snapshot(self) -> dict[str, float]:
        return {"process": psutil.Process().create_time(), **self.marks}


CLOCK = Clock()


def phases(marks: Mapping[str, float], launched_at: float | None) -> dict[str, float] | None:
    """Seconds of each phase for one rank; None when a mark is missing."""
    points = {"launch": launched_at, **marks}
    out, prev = {}, "launch" if launched_at is not None else "process"
    for phase, end in PHASES:
        if end == "process" and launched_at is None:
            continue  # started by hand: no launch instant to count from
        if end not in points or points.get(prev) is None:
            return None
        out[phase] = max(float(points[end]) - float(points[prev]), 0.0)  # type: ignore[arg-type]
        prev = end
    return out


def fields(per_rank: Sequence[Mapping[str, float]], labels: Mapping[str, Any]) -> RunFields:
    """The record's `startup`: the last rank's phases, and every rank's total."""
    launched = labels.get("launched_at")
    launched_at = float(launched) if isinstance(launched, int | float) else None
    ranks = [phases(m, launched_at) for m in per_rank]
    if not ranks or any(r is None for r in ranks):
        return {}
    totals = [sum(r.values()) for r in ranks if r is not None]
    last = max(range(len(totals)), key=totals.__getitem__)
    return {
        "startup": {
            "from": "launch" if launched_at is not None else "process start",
            "total_s": totals[last],
            "phases_s": ranks[last],
            "rank": last,
            "per_rank_total_s": totals,
        }
    }
