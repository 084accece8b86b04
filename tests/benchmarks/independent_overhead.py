"""Does the harness cost an engine speed? Each runner against an independent canonical loop.

    .venv/bin/python tests/benchmarks/independent_overhead.py [--mode interleaved|launches]
        [--engines horovod,ddp,paddle] [--workers 1,2] [--window-steps 20]
        interleaved: [--launches 3] [--pairs 150]    launches: [--pairs 12] [--steps 400]

The canonical loops (tests/benchmarks/independent/) are each engine's documented
recipe with the textbook LeNet written out per framework (stock modules); they
share nothing with the suite but the data arrays, which this script writes to an
.npz. Runner and canonical loop get the same batch (32 per worker), 28x28
synthetic data, 1 thread, worker count and launcher, and are timed the same way
(windows of steps, one synchronisation per window).

Two ways to cancel machine drift, which moves separate launches by +-20% here:

- interleaved (default): one launch per repeat runs both in the same processes
  (tests/benchmarks/interleaved_worker.py): the runner's adapter and timed region,
  and the recipe's `make_step`, window by window in alternating order. Each pair of
  adjacent windows gives one ratio; the 95% interval is the exact order-statistic
  interval of the median over every pair of every launch, and each launch's own
  median is printed, so a launch that disagrees shows.
- launches: runner and canonical loop as separate launches back to back in
  alternating order (shares nothing at all, not even the process); one ratio of
  median window throughputs per pair of launches. Its intervals stay wide on a
  noisy machine: it can show a large cost, not confirm a 2% one.

The verdict is on ">= 0.98": confirmed (interval above), short (interval below),
or undecided. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np

from bench import engines, records
from bench.contract import data as bdata
from bench.engines import Engine
from bench.measure import stats

HERE = Path(__file__).resolve().parent / "independent"
WORKER = Path(__file__).resolve().parent / "interleaved_worker.py"
LOOPS = {Engine.DDP: "ddp.py", Engine.HOROVOD: "hvd.py", Engine.PADDLE: "paddle_dp.py"}
TARGET = 0.98


def write_data(path: Path) -> None:
    ds = bdata.load_dataset(
        "synthetic", seed=0, test_fraction=0.2, input_shape=(1, 28, 28), samples=2048
    )
    np.savez(path, x=ds.train_x.astype(np.float32), y=ds.train_y.astype(np.int64))


def canonical(engine: Engine, workers: int, args: argparse.Namespace, data: Path) -> float:
    argv = engines.local_argv(
        engine,
        workers,
        [
            "--data",
            str(data),
            "--steps",
            str(args.steps),
            "--warmup-steps",
            str(args.warmup_steps),
            "--window-steps",
            str(args.window_steps),
        ],
        script=HERE / LOOPS[engine],
    )
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, cwd=HERE)
    line = next((ln for ln in proc.stdout.splitlines() if "INDEPENDENT " in ln), None)
    if line is None:
        raise RuntimeError(f"canonical {engine.value} loop failed:\n{proc.stderr[-3000:]}")
    return float(np.median(json.loads(line.split("INDEPENDENT ", 1)[1])["window_throughput"]))


def runner(
    engine: Engine, workers: int, args: argparse.Namespace, results: Path
) -> tuple[float, bool]:
    argv = engines.local_argv(
        engine,
        workers,
        [
            "--model",
            "lenet",
            "--dataset",
            "synthetic",
            "--batch-size",
            "32",
            "--threads",
            "1",
            "--warmup-steps",
            str(args.warmup_steps),
            "--max-steps",
            str(args.warmup_steps + args.steps),
            "--epochs",
            "1000",
            "--lr-schedule",
            "constant",
            "--window-steps",
            str(args.window_steps),
            "--target-ci",
            "0",
            "--results",
            str(results),
            "--quiet",
        ],
    )
    rec = launch_record(argv, results, engine)
    return float(np.median(rec["window_throughput"])), bool(rec.get("contended"))


def launch_record(argv: list[str], results: Path, engine: Engine) -> dict[str, Any]:
    """Run one runner launch and return the record it appended to `results`."""
    before = len(records.load([results]).records) if results.exists() else 0
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    recs = records.load([results]).records if results.exists() else []
    if proc.returncode != 0 or len(recs) <= before:
        raise RuntimeError(f"{engine.value} runner failed:\n{proc.stderr[-3000:]}")
    return dict(recs[-1])


def interleaved(
    engine: Engine, workers: int, args: argparse.Namespace, data: Path
) -> tuple[list[float], float]:
    """One launch of the interleaved worker: (runner / canonical per window pair, launch median)."""
    argv = engines.local_argv(
        engine,
        workers,
        [
            "--engine",
            engine.value,
            "--data",
            str(data),
            "--pairs",
            str(args.pairs),
            "--window-steps",
            str(args.window_steps),
            "--warmup-steps",
            str(args.warmup_steps),
        ],
        script=WORKER,
    )
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    line = next((ln for ln in proc.stdout.splitlines() if "INTERLEAVED " in ln), None)
    if line is None:
        raise RuntimeError(f"interleaved {engine.value} worker failed:\n{proc.stderr[-3000:]}")
    out = json.loads(line.split("INTERLEAVED ", 1)[1])
    # same steps and batch on both sides: throughput ratio = canonical time / runner time
    ratios = [c / r for r, c in zip(out["runner_s"], out["canonical_s"], strict=True)]
    return ratios, float(np.median(ratios))


def verdict(est: stats.Estimate) -> str:
    if est.low is None or est.high is None:
        return stats.TOO_FEW
    if est.low >= TARGET:
        return f">= {TARGET} confirmed"
    if est.high < TARGET:
        return f"below {TARGET}"
    return "undecided"


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--mode", choices=("interleaved", "launches"), default="interleaved")
    p.add_argument("--engines", default="horovod,ddp,paddle")
    p.add_argument("--workers", default="1,2")
    p.add_argument("--launches", type=int, default=3, help="interleaved: launches per cell")
    p.add_argument(
        "--pairs",
        type=int,
        help="window pairs per launch (interleaved, default 150) or "
        "pairs of launches (launches, default 12)",
    )
    p.add_argument("--steps", type=int, default=400, help="launches: timed steps per launch")
    p.add_argument("--warmup-steps", type=int, default=20)
    p.add_argument("--window-steps", type=int, default=20)
    args = p.parse_args()
    if args.pairs is None:
        args.pairs = 150 if args.mode == "interleaved" else 12
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data.npz"
        write_data(data)
        for workers in (int(w) for w in args.workers.split(",")):
            for engine in (Engine(e) for e in args.engines.split(",")):
                ratios, contended, per_launch = [], 0, []
                if args.mode == "interleaved":
                    for n in range(args.launches):
                        pairs, med = interleaved(engine, workers, args, data)
                        ratios.extend(pairs)
                        per_launch.append(med)
                        print(
                            f"  {engine.value} np={workers} launch {n + 1}: {med:.3f}", flush=True
                        )
                else:
                    for pair in range(args.pairs):
                        results = Path(tmp) / f"{engine.value}-{workers}.jsonl"
                        if pair % 2 == 0:
                            r, busy = runner(engine, workers, args, results)
                            c = canonical(engine, workers, args, data)
                        else:
                            c = canonical(engine, workers, args, data)
                            r, busy = runner(engine, workers, args, results)
                        ratios.append(r / c)
                        contended += busy
                        print(
                            f"  {engine.value} np={workers} pair {pair + 1}: {r / c:.3f}",
                            flush=True,
                        )
                est = stats.estimate(ratios)
                half = stats.relative_half_width(est)
                rows.append((engine.value, workers, est, half, verdict(est), contended, per_launch))
                print(
                    f"{engine.value:8} np={workers}  ratio {est.fmt('.3f')}  {verdict(est)}",
                    flush=True,
                )
    last = "per-launch medians" if args.mode == "interleaved" else "contended"
    print(
        f"\n| engine | workers | runner / canonical | 95% interval | half-width | verdict | {last} |"
    )
    print("|---|---|---|---|---|---|---|")
    for e, w, est, half, what, n_busy, meds in rows:
        width = "-" if half is None else f"{half:.1%}"
        extra = ", ".join(f"{m:.3f}" for m in meds) if meds else f"{n_busy}/{est.n}"
        print(
            f"| {e} | {w} | {est.value:.3f} | {est.interval('.3f')} | {width} | {what} | {extra} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
