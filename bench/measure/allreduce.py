"""The allreduce benchmark's defaults, shared by the worker that times it
(runners/protocol/allreduce.py) and `bench collectives`, which plans its cells."""

from __future__ import annotations

# Message sizes timed by default: 4 KiB .. 64 MiB, x4.
DEFAULT_SIZES = [4 * 1024 * 4**i for i in range(8)]
