"""Pinning a worker and its engine's threads to cores of their own (--pin-cores).

Each worker on a node takes an equal, disjoint share of the CPUs it may run on, in
local-rank order; every thread of the process is moved there, the engine's own ones
included (Horovod's background thread, Gloo's and the OpenMP pool's), and threads
created later inherit it from their creator. With more workers than CPUs there is no
disjoint share: the OS keeps placing them, and the record says so.
"""

from __future__ import annotations

import os
from pathlib import Path


def share(cpus: list[int], local_rank: int, local_size: int) -> list[int] | None:
    """This worker's cores: its slice of `cpus`, or None when a worker would get none."""
    per = len(cpus) // max(local_size, 1)
    if per < 1:
        return None
    return cpus[local_rank * per : (local_rank + 1) * per]


def pin(local_rank: int, local_size: int) -> list[int] | None:
    """Move every thread of this process to its share of cores; the cores, or None."""
    mine = share(sorted(os.sched_getaffinity(0)), local_rank, local_size)
    if mine is None:
        return None
    for task in Path("/proc/self/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), mine)
        except (OSError, ValueError):  # a thread that ended in between
            continue
    return mine
