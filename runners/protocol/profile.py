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

from bench.core import machine
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


def waits(adapter: EngineAdapter, batches: Sequence[Any], seconds: float) -> dict[str, Any] | None:
    """Per rank: its own work's mean, median, p90 and max ms, the mean and p90 ms it
    waited for the others at the barrier that ends each iteration, the share of
    iterations it arrived last, and the CPU its process had while it worked. Runs for
    `seconds` (every rank's mean clock) and WAITS_MIN_ITERATIONS at least, cycling over
    `batches`."""
    if adapter.world_size < 2 or not batches:
        return None
    adapter.barrier()
    arrive: list[float] = []
    leave: list[float] = []
    # every thread of the process counts (the engine's own included), over the wall
    # time of the rank's own work
    start = last = time.perf_counter()
    cpu, own_cpu, own_wall = time.process_time(), 0.0, 0.0
    throttled = machine.cgroup_throttled_s()  # a CPU quota's stops, where a cgroup says
    for i, batch in enumerate(itertools.cycle(batches)):
        adapter.local_step(batch)
        adapter.synchronize()
        arrive.append(time.perf_counter())
        own_cpu += time.process_time() - cpu
        own_wall += arrive[-1] - last
        adapter.barrier()
        leave.append(last := time.perf_counter())
        cpu = time.process_time()
        if (i + 1) % _CHUNK == 0 and i + 1 >= WAITS_MIN_ITERATIONS:
            spent = adapter.allreduce_sum(np.asarray([last - start])) / adapter.world_size
            if float(spent[0]) >= seconds:  # every rank reads the same sum: all stop
                break
            cpu, last = time.process_time(), time.perf_counter()
    k = len(arrive)
    after = machine.cgroup_throttled_s()
    stopped = np.nan if throttled is None or after is None else 1e3 * (after - throttled)
    gathered = adapter.allgather(np.asarray([*arrive, *leave, own_cpu / own_wall, stopped]))
    one_host = adapter.local_world_size == adapter.world_size  # one clock for every rank
    found = _waited(gathered[:, :k], gathered[:, k : 2 * k], one_host)
    # The CPU a rank's process had while it worked, over that work's wall time: a rank a
    # neighbour starves gets less than the others; one slowed by its own threads
    # (Horovod's coordinator, rank 0, on a full machine) does not.
    found["own_cpu_share"] = _finite(gathered[:, 2 * k])
    # what its cgroup's CPU quota stopped it for, in ms over the probe (None: no cgroup)
    found["throttled_ms"] = _finite(gathered[:, 2 * k + 1])
    found["seconds"] = float(np.max(gathered[:, 2 * k - 1] - gathered[:, k]))
    return found


def _waited(arrive: np.ndarray, leave: np.ndarray, one_host: bool) -> dict[str, Any]:
    """The waits from every rank's arrival and leave times (rows: ranks). On one host the
    ranks share a clock (perf_counter is the system's monotonic clock); across hosts a
    rank's offset is the median of its leave times less rank 0's (a barrier lets every
    rank go at once, but for one stopped just then). A rank's own work is from its last
    leave to its next arrival."""
    offset = 0.0 if one_host else np.median(leave - leave[0], axis=1, keepdims=True)
    arrived = arrive - offset
    waited = 1e3 * (arrived.max(axis=0) - arrived)  # ms each rank waited for the last
    own = 1e3 * (arrive[:, 1:] - leave[:, :-1])
    last = (arrived == arrived.max(axis=0)).mean(axis=1)
    return {
        "iterations": int(arrive.shape[1]),
        "own_ms": {
            "mean": _finite(own.mean(axis=1)),
            "p50": _finite(np.median(own, axis=1)),
            "p90": _finite(np.percentile(own, 90, axis=1)),
            "max": _finite(own.max(axis=1)),
        },
        "wait_ms": {
            "mean": _finite(waited.mean(axis=1)),
            "p90": _finite(np.percentile(waited, 90, axis=1)),
        },
        "last_share": _finite(last),
    }


def _median(column: np.ndarray) -> float:
    return float(np.nanmedian(column)) if np.isfinite(column).any() else np.nan


def _finite(values: np.ndarray) -> list[float | None]:
    return [float(v) if np.isfinite(v) else None for v in values]
