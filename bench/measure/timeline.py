"""Summaries of Horovod timelines (Chrome trace JSON written by Horovod's background thread).

Each tensor is a trace "process"; its activities are begin/end pairs such as
NEGOTIATE_ALLREDUCE (ranks agreeing the tensor is ready), ALLREDUCE (the
collective, with nested phases such as MEMCPY_IN_FUSION_BUFFER and
GLOO_ALLREDUCE) and WAIT_FOR_DATA. Durations are summed per activity name over
all tensors, so concurrent tensors add up: read them as busy time, not wall time.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

ALLREDUCES = ("ALLREDUCE", "ADASUM_ALLREDUCE")  # the collective itself, fusion copies inside


def load_events(path: str | Path) -> list[dict[str, Any]]:
    """The trace events; tolerates the unterminated array Horovod leaves while writing.
    A `.gz` file (a traced run's timeline, runners/protocol/trace.py) is read unpacked."""
    path = Path(path)
    raw = path.read_bytes()
    text = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode().strip()
    if not text:
        return []
    if not text.endswith("]"):
        text = text.rstrip(",\n ") + "]"
    events = json.loads(text)
    return [e for e in events if isinstance(e, dict)]


def spans(path: str | Path, names: tuple[str, ...] = ALLREDUCES) -> list[tuple[float, float]]:
    """(start, end) seconds of every activity called one of `names`, over all tensors
    (fused tensors share an interval: take the union, `runners.adapters.base.union_seconds`)."""
    out: list[tuple[float, float]] = []
    open_: dict[tuple[Any, Any], list[tuple[str, float]]] = defaultdict(list)
    for e in load_events(path):
        key, ts = (e.get("pid"), e.get("tid")), float(e.get("ts", 0)) / 1e6
        if e.get("ph") == "B":
            open_[key].append((str(e.get("name")), ts))
        elif e.get("ph") == "E" and open_[key]:
            name, start = open_[key].pop()
            if name in names:
                out.append((start, ts))
        elif e.get("ph") == "X" and str(e.get("name")) in names:
            out.append((ts, ts + float(e.get("dur", 0)) / 1e6))
    return out


def summarise(path: str | Path, steps: int) -> dict[str, Any]:
    """Total milliseconds per activity name, and per training step the gradient allreduce's
    negotiation, collective and waiting time (start-up broadcasts excluded)."""
    try:
        events = load_events(path)
    except (OSError, EOFError, ValueError) as exc:  # a truncated or bad file
        return {"path": str(path), "error": f"cannot read timeline: {exc}"}
    open_: dict[tuple[Any, Any], list[tuple[str, float]]] = defaultdict(list)
    totals: dict[str, float] = defaultdict(float)
    for e in events:
        key = (e.get("pid"), e.get("tid"))
        if e.get("ph") == "B":
            open_[key].append((str(e.get("name")), float(e.get("ts", 0))))
        elif e.get("ph") == "E" and open_[key]:
            name, start = open_[key].pop()
            totals[name] += (float(e.get("ts", 0)) - start) / 1e3
        elif e.get("ph") == "X":
            totals[str(e.get("name"))] += float(e.get("dur", 0)) / 1e3

    def total(pred: Any) -> float:
        return sum(v for k, v in totals.items() if pred(k))

    per_step = 1.0 / max(steps, 1)
    return {
        "path": str(path),
        "activities_ms": dict(sorted(totals.items())),
        "per_step_ms": {
            "negotiation": total(lambda k: k == "NEGOTIATE_ALLREDUCE") * per_step,
            "allreduce": total(lambda k: k in ALLREDUCES) * per_step,
            "wait": total(lambda k: "WAIT" in k) * per_step,
        },
    }
