"""The step breakdown's measurements: steps timed phase by phase after the timed windows.

Every engine's `train_step` ends its phases through `EngineAdapter._phase` (forward,
backward, optimizer); here a `PhaseClock` is attached for a few extra steps, the
engine's communication probe runs around them (a DDP communication hook, Horovod's
timeline, none on Paddle over Gloo), and every rank's medians are gathered. These
steps follow the trained result and every timed window, so no reported throughput
includes them (tests/test_breakdown.py runs with and without them). What they mean
together with the compute-only twin is bench/tables/breakdown.py.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from runners.adapters.base import CommProbe, EngineAdapter, PhaseClock

PHASES = ("forward", "backward", "optimizer", "buffers", "step")
NO_COMM = "none: a compute-only run (grad_sync=false) has no gradient collectives"


def _probe(adapter: EngineAdapter) -> CommProbe:
    """The engine's communication probe, started; a probe that cannot start (a hook the
    framework refuses) costs the breakdown its communication total, never the record."""
    if not adapter.spec.grad_sync:
        return CommProbe(NO_COMM)
    try:
        return adapter.comm_probe()
    except (RuntimeError, ValueError, OSError) as exc:
        return CommProbe(f"not measured: the probe did not start ({type(exc).__name__}: {exc})")


def profile(adapter: EngineAdapter, steps: Sequence[tuple[Any, float]]) -> dict[str, Any] | None:
    """Train `steps` (prepared batches and learning rates) phase by phase; the record's
    `breakdown`: per rank the median milliseconds of each phase and of the whole step,
    and the communication time the engine's probe saw per step (rank 0's on Horovod)."""
    if not steps:
        return None
    adapter.synchronize()
    probe = _probe(adapter)
    rows = []
    for batch, lr in steps:
        clock = PhaseClock(adapter.synchronize)
        start = time.perf_counter()
        adapter.phase_clock = clock
        try:
            adapter.train_step(batch, lr)
        finally:
            adapter.phase_clock = None
        adapter.synchronize()
        ms = {p: 1e3 * v for p, v in clock.phases.items()}
        rows.append(
            [*(ms.get(p, np.nan) for p in PHASES[:-1]), 1e3 * (time.perf_counter() - start)]
        )
    comm_s = probe.stop() if adapter.spec.grad_sync else 0.0
    return _gathered(adapter, np.asarray(rows, dtype=np.float64), comm_s, probe.source)


def _gathered(
    adapter: EngineAdapter, table: np.ndarray, comm_s: float | None, source: str
) -> dict[str, Any]:
    """Every rank's medians, the forward's quartiles and the communication per step."""
    n, steps = len(PHASES), len(table)
    medians = [_median(table[:, i]) for i in range(n)]
    # the forward's spread over steps: a rank's own work, never waiting for another's
    # (the straggler verdict compares ranks by it; a buffer broadcast is its own phase)
    forward_iqr = np.nanpercentile(table[:, 0], [25, 75])
    comm_ms = np.nan if comm_s is None else 1e3 * comm_s / steps
    gathered = adapter.allgather(np.asarray([*medians, comm_ms, *forward_iqr], dtype=np.float64))
    return {
        "steps": steps,
        "after_timed": True,  # never part of a reported throughput
        "phases_ms": {p: _finite(gathered[:, i]) for i, p in enumerate(PHASES)},
        "forward_iqr_ms": [_finite(row) for row in gathered[:, n + 1 : n + 3]],
        "comm_ms": _finite(gathered[:, n]),
        "comm_source": source,
    }


def _median(column: np.ndarray) -> float:
    return float(np.nanmedian(column)) if np.isfinite(column).any() else np.nan


def _finite(values: np.ndarray) -> list[float | None]:
    return [float(v) if np.isfinite(v) else None for v in values]
