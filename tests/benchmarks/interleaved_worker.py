"""One launched process per rank that times the runner's step and the engine's recipe in turn.

Launched by tests/benchmarks/independent_overhead.py (--mode interleaved) through the
engine's own launcher. The runner's side is the suite's own path: its adapter
(init, build from the suite's initial weights, to_batch) and `protocol.timed_window`,
the timed region every record's throughput comes from. The canonical side is the
recipe's `make_step` from independent/ (stock modules, the engine's documented
optimizer wrapping), built in the same process after the adapter brought the
process group up. Windows alternate runner/recipe, then recipe/runner, so the
two sides of a pair run within milliseconds of each other and machine drift,
which moves separate launches by +-20% on a small VM, cancels in their ratio.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE / "independent"))

RECIPES = {"ddp": "ddp", "horovod": "hvd", "paddle": "paddle_dp"}
SHAPE, CLASSES = (1, 28, 28), 10


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--engine", required=True, choices=sorted(RECIPES))
    p.add_argument("--data", required=True, help=".npz with x [N, 1, 28, 28] float32, y [N] int64")
    p.add_argument("--pairs", type=int, default=200)
    p.add_argument("--window-steps", type=int, default=20)
    p.add_argument("--warmup-steps", type=int, default=20)
    p.add_argument("--batches", type=int, default=64, help="distinct batches per rank, cycled")
    args = p.parse_args()

    from bench.contract.spec import Device, LRSchedule, RunSpec
    from bench.core import machine as benv
    from bench.engines import Engine

    # The runner's order: thread variables before any framework loads.
    spec = RunSpec(
        model="lenet",
        dataset="synthetic",
        batch_size=32,
        threads=1,
        lr_schedule=LRSchedule.CONSTANT,
        device=Device.CPU,
    )
    benv.set_thread_env(spec.threads)

    import importlib

    import numpy as np

    import models
    from runners.protocol import common, timing

    engine = Engine(args.engine)
    adapter = common.load_adapter(engine)(spec, 300.0, {})
    adapter.init()
    rank, world = adapter.rank, adapter.world_size
    model = models.get(spec.model)
    weights = models.init_weights(model, SHAPE, CLASSES, spec.seed)
    adapter.build(model, weights, SHAPE, CLASSES)

    with np.load(args.data) as f:
        x, y = f["x"], f["y"]
    per, n = spec.batch_size, args.batches
    data = []
    for s in range(n):  # this rank's slice of consecutive global batches
        start = ((s * world + rank) * per) % (len(y) - per)
        data.append((np.ascontiguousarray(x[start : start + per]), y[start : start + per].copy()))
    runner_batches = [adapter.to_batch(bx, by) for bx, by in data]
    lr = spec.scaled_lr(world)  # constant schedule: the recipe's lr x world
    recipe_step = importlib.import_module(RECIPES[engine.value]).make_step(data, spec.lr, world)

    def runner_window(idx: list[int]) -> float:
        plan = [(runner_batches[i], lr) for i in idx]  # prepared before, as in the runner
        return timing.timed_window(adapter, plan).seconds

    def recipe_window(idx: list[int]) -> float:
        t0 = time.perf_counter()
        for i in idx:
            recipe_step(i)
        adapter.synchronize()  # the recipe's one synchronisation per window (none on CPU)
        return time.perf_counter() - t0

    w = args.window_steps
    warm = [i % n for i in range(args.warmup_steps)]
    runner_window(warm)
    recipe_window(warm)
    runner_s, recipe_s = [], []
    for pair in range(args.pairs):
        idx = [(pair * w + j) % n for j in range(w)]
        if pair % 2 == 0:
            runner_s.append(runner_window(idx))
            recipe_s.append(recipe_window(idx))
        else:
            recipe_s.append(recipe_window(idx))
            runner_s.append(runner_window(idx))
    # A window lasts as long as its slowest rank.
    slowest = adapter.allgather(np.asarray(runner_s + recipe_s, dtype=np.float64)).max(axis=0)
    if rank == 0:
        out = {
            "runner_s": slowest[: args.pairs].tolist(),
            "canonical_s": slowest[args.pairs :].tolist(),
            "window_steps": w,
            "global_batch": per * world,
        }
        print("INTERLEAVED " + json.dumps(out), flush=True)
    adapter.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
