"""Does the harness cost an engine speed? Each runner against an independent canonical loop.

    .venv/bin/python tests/benchmarks/independent_overhead.py [--pairs 12] [--workers 1,2]
        [--engines horovod,ddp,paddle] [--steps 400] [--window-steps 20]

The canonical loops (tests/benchmarks/independent/) share nothing with the suite
but the data arrays, which this script writes to an .npz: the textbook LeNet
written out per framework, each engine's documented recipe, and the same window
timing (one synchronisation per window). Runner and canonical loop get the same
batch (32 per worker), 28x28 synthetic data, 1 thread, worker count and launcher.

Machine drift is cancelled by pairing: each pair launches both back to back, in
alternating order (runner first, then canonical first), and gives one ratio of
median window throughputs. The result per engine and worker count is the median
ratio over pairs with its 95% interval (bench.stats.estimate: exact
order-statistic interval from 6 pairs), the interval's half-width, and a verdict
on ">= 0.98": confirmed (interval above), short (interval below), or undecided
(more pairs needed). Pairs whose runner record says `contended` are reported;
run it on an otherwise idle machine.
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

from bench import data as bdata
from bench import launch, records, stats
from bench.engines import Engine

HERE = Path(__file__).resolve().parent / "independent"
LOOPS = {Engine.DDP: "ddp.py", Engine.HOROVOD: "hvd.py", Engine.PADDLE: "paddle_dp.py"}
TARGET = 0.98


def write_data(path: Path) -> None:
    ds = bdata.load_dataset(
        "synthetic", seed=0, test_fraction=0.2, input_shape=(1, 28, 28), samples=2048
    )
    np.savez(path, x=ds.train_x.astype(np.float32), y=ds.train_y.astype(np.int64))


def canonical(engine: Engine, workers: int, args: argparse.Namespace, data: Path) -> float:
    argv = launch.launch_argv(
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
    argv = launch.launch_argv(
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
    before = len(records.load([results]).records) if results.exists() else 0
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    recs = records.load([results]).records if results.exists() else []
    if proc.returncode != 0 or len(recs) <= before:
        raise RuntimeError(f"{engine.value} runner failed:\n{proc.stderr[-3000:]}")
    rec = recs[-1]
    return float(np.median(rec["window_throughput"])), bool(rec.get("contended"))


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--engines", default="horovod,ddp,paddle")
    p.add_argument("--workers", default="1,2")
    p.add_argument("--pairs", type=int, default=12)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--warmup-steps", type=int, default=20)
    p.add_argument("--window-steps", type=int, default=20)
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data.npz"
        write_data(data)
        for workers in (int(w) for w in args.workers.split(",")):
            for engine in (Engine(e) for e in args.engines.split(",")):
                ratios, contended = [], 0
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
                    print(f"  {engine.value} np={workers} pair {pair + 1}: {r / c:.3f}", flush=True)
                est = stats.estimate(ratios)
                half = stats.relative_half_width(est)
                if est.low is None or est.high is None:
                    verdict = stats.TOO_FEW
                elif est.low >= TARGET:
                    verdict = f">= {TARGET} confirmed"
                elif est.high < TARGET:
                    verdict = f"below {TARGET}"
                else:
                    verdict = "undecided: more pairs"
                rows.append((engine.value, workers, est, half, verdict, contended))
                print(
                    f"{engine.value:8} np={workers}  ratio {est.fmt('.3f')}  {verdict}", flush=True
                )
    print(
        "\n| engine | workers | runner / canonical | 95% interval | half-width | verdict | contended |"
    )
    print("|---|---|---|---|---|---|---|")
    for e, w, est, half, verdict, n_busy in rows:
        width = "-" if half is None else f"{half:.1%}"
        print(
            f"| {e} | {w} | {est.value:.3f} | {est.interval('.3f')} | {width} | {verdict} "
            f"| {n_busy}/{est.n} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
