"""Start-up time, from marks to phases: the launcher's start to the first timed step.

Runners mark wall-clock instants (runners/protocol/startup.py) as each rank passes the
boundaries below; these functions turn every rank's marks into the record's `startup`
(the phases of the rank that reached its first timed step last, since the run starts
when all of them have), and name the phases for the comparison's table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# (phase, its spans as (from mark, to mark)), in the order the table shows them. The
# spans tile the start-up from the launch to the first timed step, in the order a
# runner passes them: the input (the dataset among it) is checked before the framework
# loads, so that bad input is refused in a fraction of a second, and the framework's
# import counts with the interpreter's start, as the work of loading code.
PHASES: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("launcher", (("launch", "process"),)),  # the sweep's launch to this worker existing
    # Python and the runner's modules; the framework's import, after the data
    ("interpreter and imports", (("process", "started"), ("data", "imported"))),
    ("data", (("started", "data"),)),  # the input checked, the dataset loaded
    ("process group", (("imported", "group"),)),  # the engine's initialisation (rendezvous)
    ("harness set-up", (("group", "recorded"),)),  # the record's environment (CPU, git, ...)
    ("build and broadcast", (("recorded", "built"),)),  # the model from the shared weights
    ("warm-up steps", (("built", "first_timed"),)),  # first-step compilation included
)


def phases(marks: Mapping[str, float], launched_at: float | None) -> dict[str, float] | None:
    """Seconds of each phase for one rank; None when a mark is missing. Started by hand
    (no launch instant), a run counts from its process's start, without a launcher phase."""
    points: dict[str, float] = dict(marks)
    if launched_at is not None:
        points["launch"] = launched_at
    out: dict[str, float] = {}
    for phase, spans in PHASES:
        if launched_at is None and spans[0][0] == "launch":
            continue  # started by hand: no launch instant to count from
        if any(mark not in points for span in spans for mark in span):
            return None
        out[phase] = sum(max(points[end] - points[begin], 0.0) for begin, end in spans)
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
