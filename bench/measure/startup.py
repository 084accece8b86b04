"""Start-up time, from marks to phases: the launcher's start to the first timed step.

Runners mark wall-clock instants (runners/protocol/startup.py) as each rank passes the
boundaries below; these functions turn every rank's marks into the record's `startup`
(the phases of the rank that reached its first timed step last, since the run starts
when all of them have), and name the phases for the comparison's table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

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


def fields(per_rank: Sequence[Mapping[str, float]], labels: Mapping[str, Any]) -> dict[str, Any]:
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
