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

import itertools
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from bench.measure import contention
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


# Seconds the waits probe runs per profiled step, and its iterations at least: a CPU
# quota lets a rank run its share of each 100 ms period and then stops it, so the probe
# must span several periods to see it (0.5 s at the default 10 profiled steps).
WAITS_S_PER_PROFILED_STEP = 0.05
WAITS_MIN_ITERATIONS = 50
_CHUNK = 10  # iterations between the ranks' agreement on whether to go on
_ZERO = np.zeros(1)


def waits(adapter: EngineAdapter, batches: Sequence[Any], seconds: float) -> dict[str, Any] | None:
    """Who waits for whom: per rank, its own work (mean, p50, p90, max ms), the share of
    the time it waited for the others, and the share it was held back by something
    outside its process. Runs for `seconds` (every rank's mean clock) and
    WAITS_MIN_ITERATIONS at least, cycling over `batches`.

    A rank's wait is its time inside the collective less the time it was held back there
    from outside its process (`_held_since`): a rank a CPU quota stops inside the
    collective was not waiting for anyone. Held back: its main thread's run-queue delay
    over the probe less the CPU its own other threads had meanwhile (a rank slowed by its
    own engine's threads, Horovod's coordinator on a full machine, was not held back)."""
    if adapter.world_size < 2 or not batches:
        return None
    adapter.barrier()
    own, blocked, stopped = [], [], []
    start = last = time.perf_counter()
    held = contention.Held.now()
    for i, batch in enumerate(itertools.cycle(batches)):
        adapter.local_step(batch)
        adapter.synchronize()
        arrived = time.perf_counter()
        own.append(arrived - last)
        before = _held_counters()
        # a collective on the engine's data path as the meeting point: Paddle's barrier
        # polls its store, so it would time the polling, not the wait
        adapter.allreduce_sum(_ZERO)
        last = time.perf_counter()
        blocked.append(last - arrived)
        stopped.append(_held_since(before))
        if (i + 1) % _CHUNK == 0 and i + 1 >= WAITS_MIN_ITERATIONS:
            spent = adapter.allreduce_sum(np.asarray([last - start])) / adapter.world_size
            if float(spent[0]) >= seconds:  # every rank reads the same sum: all stop
                break
            last = time.perf_counter()  # the agreement is no rank's own work
    wall = sum(own) + sum(blocked)
    after = contention.Held.now()
    shares = after.since(held, wall) if held and after else {}
    waited = max(0.0, sum(blocked) - sum(stopped)) / wall
    quota = shares.get("throttled_ms")
    row = [*_quantiles(1e3 * np.asarray(own)), waited, shares.get("held_share"), quota, wall]
    gathered = adapter.allgather(np.asarray(row, dtype=np.float64))
    return {
        "iterations": len(own),
        "seconds": float(gathered[:, 7].max()),
        "own_ms": {k: _finite(gathered[:, i]) for i, k in enumerate(("mean", "p50", "p90", "max"))},
        "wait_share": _finite(gathered[:, 4]),
        "held_share": _finite(gathered[:, 5]),  # None where the kernel does not say
        "throttled_ms": _finite(gathered[:, 6]),  # its cgroup's CPU quota (None: no cgroup)
    }


def _held_counters() -> tuple[float, float, float]:
    return contention.run_delay_s() or 0.0, time.process_time(), time.thread_time()


def _held_since(before: tuple[float, float, float]) -> float:
    """Seconds this thread was held back from outside its process since `before`: its
    run-queue delay less what its own other threads ran meanwhile (an engine's
    communication thread taking the core from it inside the collective is its own)."""
    delay, process, thread = _held_counters()
    own_threads = (process - before[1]) - (thread - before[2])
    return max(0.0, delay - before[0] - own_threads)


def _quantiles(ms: np.ndarray) -> list[float]:
    return [float(ms.mean()), *(float(np.percentile(ms, q)) for q in (50, 90)), float(ms.max())]


def _median(column: np.ndarray) -> float:
    return float(np.nanmedian(column)) if np.isfinite(column).any() else np.nan


def _finite(values: np.ndarray) -> list[float | None]:
    return [float(v) if np.isfinite(v) else None for v in values]
