"""Does the harness cost the engines speed? Runner vs the engine's own hand-written loop.

    .venv/bin/python tests/benchmarks/overhead.py [--repeats 5] [--workers 1,2] [--engines ...]

For each engine and worker count, alternately runs the bench runner and the
canonical loop from the engine's docs (tests/benchmarks/handwritten/) on the
same model, batch, data, threads and worker count, through the same launcher,
and prints runner / hand-written steady-state throughput: the median ratio over
repeats with its min and max. The runner's side is its `loop_throughput`: the
wall time of its timed steps *including* its own work between steps.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np

from bench import launch, records
from bench.engines import Engine

HERE = Path(__file__).resolve().parent / "handwritten"
LOOPS = {Engine.DDP: "ddp_loop.py", Engine.HOROVOD: "hvd_loop.py", Engine.PADDLE: "paddle_loop.py"}


def measure(
    engine: Engine, workers: int, steps: int, warmup: int, model: str, results: Path
) -> tuple[float, float]:
    common = [
        "--model",
        model,
        "--batch-size",
        "32",
        "--warmup-steps",
        str(warmup),
        "--threads",
        "1",
        "--lr",
        "0.05",
    ]
    hand = subprocess.run(
        launch.launch_argv(
            engine, workers, [*common, "--steps", str(steps)], script=HERE / LOOPS[engine]
        ),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=HERE,
    )
    line = next((ln for ln in hand.stdout.splitlines() if "HANDWRITTEN " in ln), None)
    if line is None:
        raise RuntimeError(
            f"hand-written {engine.value} loop failed:\n{hand.stdout[-2000:]}{hand.stderr[-2000:]}"
        )
    hand_tp = json.loads(line.split("HANDWRITTEN ", 1)[1])["throughput"]
    run = subprocess.run(
        launch.launch_argv(
            engine,
            workers,
            [
                *common,
                "--max-steps",
                str(steps + warmup),
                "--epochs",
                "1000",
                "--lr-schedule",
                "constant",
                "--results",
                str(results),
                "--quiet",
            ],
        ),
        capture_output=True,
        text=True,
        timeout=600,
    )
    recs = records.load([results]).records
    if run.returncode != 0 or not recs:
        raise RuntimeError(
            f"{engine.value} runner failed:\n{run.stdout[-2000:]}{run.stderr[-2000:]}"
        )
    return float(recs[-1]["loop_throughput"] or "nan"), float(hand_tp)


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--engines", default="horovod,ddp,paddle")
    p.add_argument("--workers", default="1,2")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup-steps", type=int, default=20)
    p.add_argument("--model", default="lenet")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for workers in (int(w) for w in args.workers.split(",")):
            for engine in (Engine(e) for e in args.engines.split(",")):
                ratios, runner_tps, hand_tps = [], [], []
                for _ in range(args.repeats):
                    r, h = measure(
                        engine, workers, args.steps, args.warmup_steps, args.model, Path(tmp)
                    )
                    ratios.append(r / h)
                    runner_tps.append(r)
                    hand_tps.append(h)
                rows.append(
                    (
                        engine.value,
                        workers,
                        float(np.median(runner_tps)),
                        float(np.median(hand_tps)),
                        float(np.median(ratios)),
                        min(ratios),
                        max(ratios),
                    )
                )
                print(
                    f"{engine.value:8} np={workers}  runner {rows[-1][2]:9,.0f}  hand-written {rows[-1][3]:9,.0f}"
                    f"  ratio {rows[-1][4]:.3f} [{rows[-1][5]:.3f}, {rows[-1][6]:.3f}]",
                    flush=True,
                )
    print(
        "\n| engine | workers | runner samples/s | hand-written samples/s | ratio (median [min, max]) |"
    )
    print("|---|---|---|---|---|")
    for e, w, r, h, m, lo, hi in rows:
        print(f"| {e} | {w} | {r:,.0f} | {h:,.0f} | {m:.3f} [{lo:.3f}, {hi:.3f}] |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
