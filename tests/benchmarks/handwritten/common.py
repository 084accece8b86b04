"""Shared, framework-free setup for the hand-written reference loops.

Only what is not part of an engine's canonical loop lives here: argument
parsing, the same per-rank batches the runner would feed (so both do identical
work per step), and the output line. Each *_loop.py file is the training loop
as the engine's own documentation writes it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import numpy as np

from bench import data


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="lenet")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup-steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.05)
    args = p.parse_args()
    # set before the framework is imported, as the runners do
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(args.threads)
    return args


# Parsed on import, which each loop does before importing its framework: the thread
# variables must be in place before torch or paddle reads them.
ARGS = _parse()


def parse() -> argparse.Namespace:
    return ARGS


def batches(
    rank: int, world: int, per: int, steps: int
) -> tuple[list[np.ndarray], list[np.ndarray], Any]:
    ds = data.load_digits(seed=0, test_fraction=0.2)
    xs, ys = [], []
    epoch, s = 0, 0
    spe = data.steps_per_epoch(len(ds.train_y), per * world)
    order = data.epoch_order(0, 0, len(ds.train_y))
    for _ in range(steps):
        if s == spe:
            epoch, s = epoch + 1, 0
            order = data.epoch_order(0, epoch, len(ds.train_y))
        idx = data.shard(order, s, rank, per, world)
        xs.append(ds.train_x[idx])
        ys.append(ds.train_y[idx])
        s += 1
    return xs, ys, ds


def report(rank: int, samples: int, seconds: float) -> None:
    if rank == 0:
        print(
            "HANDWRITTEN "
            + json.dumps({"samples": samples, "seconds": seconds, "throughput": samples / seconds}),
            flush=True,
        )
