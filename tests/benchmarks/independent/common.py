"""Framework-free plumbing of the independent loops: arguments, data arrays, windows, output.

Nothing here comes from the suite: the loops read the data arrays from an .npz the
orchestrator wrote, and time windows of steps with the host clock, one result line
per run. Imported before the framework, so the thread variables are set in time.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True, help=".npz with x [N, 1, 28, 28] float32, y [N] int64")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=400, help="timed steps")
    p.add_argument("--warmup-steps", type=int, default=20)
    p.add_argument("--window-steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.05)
    args = p.parse_args()
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(args.threads)
    return args


def batches(path: str, rank: int, world: int, per: int, steps: int) -> list[tuple[Any, Any]]:
    """This rank's slice of consecutive global batches, one pass over the arrays at most
    (a step takes batch `i % len`: long runs need no more memory)."""
    with np.load(path) as f:
        x, y = f["x"], f["y"]
    out = []
    for s in range(min(steps, len(y) // (per * world))):
        start = ((s * world + rank) * per) % (len(y) - per)
        out.append((np.ascontiguousarray(x[start : start + per]), y[start : start + per].copy()))
    return out


class Turn:
    """Turn-taking with a second launch when BENCH_TURNS names the orchestrator's socket
    (independent_overhead.py --mode turns): wait for "g" before a window, send "d" after."""

    def __init__(self) -> None:
        self.conn: socket.socket | None = None
        if os.environ.get("BENCH_TURNS"):
            self.conn = socket.socket(socket.AF_UNIX)
            self.conn.connect(os.environ["BENCH_TURNS"])
            self.conn.sendall(b"%d\n" % os.getpid())

    def __enter__(self) -> None:
        if self.conn is not None and self.conn.recv(1) != b"g":
            raise SystemExit("the orchestrator went away")

    def __exit__(self, *_: object) -> None:
        if self.conn is not None:
            self.conn.sendall(b"d")


def run_windows(
    step: Callable[[int], None], args: argparse.Namespace, sync: Callable[[], None]
) -> list[float]:
    """Warm-up steps, then timed windows of `window_steps`; one `sync` per window."""
    turn = Turn()
    with turn:
        for i in range(args.warmup_steps):
            step(i)
        sync()
    times = []
    i = args.warmup_steps
    for start in range(0, args.steps, args.window_steps):
        n = min(args.window_steps, args.steps - start)
        with turn:
            t0 = time.perf_counter()
            for _ in range(n):
                step(i)
                i += 1
            sync()
            times.append(time.perf_counter() - t0)
    return times


def report(rank: int, window_times: list[float], sizes: list[int], global_batch: int) -> None:
    """Rank 0 prints the slowest rank's window times (already reduced) as one line."""
    if rank == 0:
        tput = [global_batch * n / t for n, t in zip(sizes, window_times, strict=True)]
        print("INDEPENDENT " + json.dumps({"window_throughput": tput}), flush=True)


def window_sizes(args: argparse.Namespace) -> list[int]:
    return [min(args.window_steps, args.steps - s) for s in range(0, args.steps, args.window_steps)]
