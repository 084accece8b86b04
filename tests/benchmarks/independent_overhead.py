"""Does the harness cost an engine speed? Each runner against an independent canonical loop.

    .venv/bin/python tests/benchmarks/independent_overhead.py [--mode turns|interleaved|launches]
        [--engines horovod,ddp,paddle] [--workers 1,2] [--launches N] [--steps N]
        [--slow-runner-ms MS] [--aa]   interleaved: [--pairs 150]   launches: [--pairs 12]

The canonical loops (tests/benchmarks/independent/) are each engine's documented
recipe with the textbook LeNet written out per framework (stock modules); they
share nothing with the suite but the data arrays, which this script writes to an
.npz. Runner and canonical loop get the same batch (32 per worker), 28x28
synthetic data, 1 thread, worker count and launcher, and are timed the same way
(windows of steps, one synchronisation per window).

Machine drift moves separate launches by +-20% here; three ways to cancel it:

- turns: runner and canonical loop as two separate launches at once, taking turns
  window by window (tests/benchmarks/take_turns.py): the side not in turn is
  stopped, turns go in ABBA order, and window k of one is paired with window k of
  the other. Nothing of the process is shared (environment, threads, imports,
  allocator, launcher settings), yet adjacent windows see the same machine. The
  launch's ratio is the median of its pair ratios (what the record's throughput, a
  window median, would show). Each process has luck of its own (placement,
  alignment, huge pages) that no pairing inside a launch cancels, so launches are
  the unit: the 95% interval is the exact order-statistic interval of the median of
  the launch ratios. The pairs pooled show the precision within launches, and the
  mean-based ratio (total times, bootstrap over pairs) what a loop throughput would.
- interleaved: one launch per repeat runs both in the same processes
  (tests/benchmarks/interleaved_worker.py): the runner's adapter and timed region,
  and the recipe's `make_step`, window by window. Anything that lives at process
  level is paid by both halves and cancels: it cannot see such a cost.
- launches: separate launches back to back in alternating order; one ratio of
  median window throughputs per pair. Its intervals stay wide on a noisy machine:
  it can show a large cost, not confirm a 2% one.

--slow-runner-ms slows every runner step on purpose (BENCH_TEST_FAULT delay), the
check that the mode sees a cost it should; --aa puts the canonical loop in place
of the runner, so the spread of its launch medians is the engine's own, with no
harness in either launch. The verdict is on ">= 0.98": confirmed
(interval above), short (interval below), or undecided. Run it on an otherwise
idle machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
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
from bench.records import packed
from tests.benchmarks import take_turns

HERE = Path(__file__).resolve().parent / "independent"
WORKER = Path(__file__).resolve().parent / "interleaved_worker.py"
LOOPS = {Engine.DDP: "ddp.py", Engine.HOROVOD: "hvd.py", Engine.PADDLE: "paddle_dp.py"}
TARGET = 0.98
BATCH = 32  # per worker, on both sides


# 2,048 training samples: 64 steps an epoch at 1 worker, 32 at 2, so the runner's
# epochs end on window boundaries when windows are 16 steps
SAMPLES = 2560


def write_data(path: Path) -> None:
    ds = bdata.load_dataset(
        "synthetic", seed=0, test_fraction=0.2, input_shape=(1, 28, 28), samples=SAMPLES
    )
    np.savez(path, x=ds.train_x.astype(np.float32), y=ds.train_y.astype(np.int64))


def canonical(engine: Engine, workers: int, args: argparse.Namespace, data: Path) -> float:
    argv = canonical_argv(engine, workers, args, data)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, cwd=HERE)
    return float(np.median(canonical_output(engine, proc.stdout, proc.stderr)))


def canonical_output(engine: Engine, stdout: str, stderr: str) -> list[float]:
    """The canonical loop's window throughputs, from its one result line."""
    line = next((ln for ln in stdout.splitlines() if "INDEPENDENT " in ln), None)
    if line is None:
        raise RuntimeError(f"canonical {engine.value} loop failed:\n{stderr[-3000:]}")
    return list(json.loads(line.split("INDEPENDENT ", 1)[1])["window_throughput"])


def runner_argv(engine: Engine, workers: int, args: argparse.Namespace, results: Path) -> list[str]:
    return engines.local_argv(
        engine,
        workers,
        ["--model", "lenet", "--dataset", "synthetic", "--synthetic-samples", str(SAMPLES),
         "--batch-size", str(BATCH), "--threads", "1", "--warmup-steps", str(args.warmup_steps),
         "--max-steps", str(args.warmup_steps + args.steps), "--epochs", "100000",
         "--lr-schedule", "constant", "--window-steps", str(args.window_steps),
         "--target-ci", "0", "--profile-steps", "0", "--results", str(results), "--quiet"],
    )  # fmt: skip


def canonical_argv(engine: Engine, workers: int, args: argparse.Namespace, data: Path) -> list[str]:
    loop_args = ["--data", str(data), "--steps", str(args.steps),
                 "--warmup-steps", str(args.warmup_steps), "--window-steps", str(args.window_steps)]  # fmt: skip
    return engines.local_argv(engine, workers, loop_args, script=HERE / LOOPS[engine])


def runner(
    engine: Engine, workers: int, args: argparse.Namespace, results: Path
) -> tuple[float, bool]:
    rec = launch_record(runner_argv(engine, workers, args, results), results, engine)
    tput = packed.window_throughput(rec)
    assert tput is not None, f"{engine.value}: the record holds no window times"
    return float(np.nanmedian(tput)), bool(rec.get("contended"))


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


def turns(
    engine: Engine, workers: int, args: argparse.Namespace, data: Path, tmp: Path
) -> list[tuple[float, float]]:
    """One pair of launches taking turns: (runner, canonical) seconds a step of each
    pair of windows."""
    results = tmp / f"turns-{engine.value}-{workers}.jsonl"
    results.unlink(missing_ok=True)
    first = (canonical_argv if args.aa else runner_argv)(
        engine, workers, args, data if args.aa else results
    )
    out = take_turns.run_pair(
        {"runner": (first, HERE if args.aa else tmp),
         "canonical": (canonical_argv(engine, workers, args, data), HERE)},
        workers, tmp,
    )  # fmt: skip
    if args.aa:  # the canonical loop against itself: the method's own floor
        runner_s = workers * BATCH / np.asarray(canonical_output(engine, out["runner"].stdout, ""))
    else:
        (rec,) = records.load([results]).records
        # per-step seconds of each timed window, the slowest rank's (as the canonical loop)
        runner_s = np.max(rec["window_times_s"], axis=0) / np.asarray(rec["window_steps"])
    canon_tput = canonical_output(engine, out["canonical"].stdout, out["canonical"].stderr)
    if len(canon_tput) != len(runner_s):
        raise RuntimeError(f"{len(runner_s)} runner windows but {len(canon_tput)} canonical")
    canon_s = workers * BATCH / np.asarray(canon_tput)
    return list(zip(runner_s.tolist(), canon_s.tolist(), strict=True))


def mean_ratio(times: list[tuple[float, float]], draws: int = 4000) -> str:
    """Total canonical time / total runner time over the pairs (what a mean-based loop
    throughput compares), with a percentile bootstrap over pairs."""
    arr = np.asarray(times)
    point = arr[:, 1].sum() / arr[:, 0].sum()
    idx = np.random.default_rng(0).integers(0, len(arr), size=(draws, len(arr)))
    boot = arr[idx, 1].sum(axis=1) / arr[idx, 0].sum(axis=1)
    low, high = np.percentile(boot, [2.5, 97.5])
    return f"{point:.3f} [{low:.3f}, {high:.3f}]"


@dataclasses.dataclass
class Cell:
    engine: str
    workers: int
    ratios: list[float] = dataclasses.field(default_factory=list)
    per_launch: list[float] = dataclasses.field(default_factory=list)
    times: list[tuple[float, float]] = dataclasses.field(default_factory=list)
    contended: int = 0

    def extra(self) -> str:
        """The table's last columns: what each mode has beside its interval."""
        launches = ", ".join(f"{m:.3f}" for m in self.per_launch)
        if self.times:
            pooled = stats.estimate(self.ratios).fmt(".3f")
            return f"{len(self.per_launch)} | {launches} | {pooled} | {mean_ratio(self.times)}"
        return launches or f"{self.contended}/{len(self.ratios)}"


def measure(engine: Engine, workers: int, args: argparse.Namespace, data: Path, tmp: Path) -> Cell:
    cell = Cell(engine.value, workers)
    if args.mode == "launches":
        for pair in range(args.pairs):
            results = tmp / f"{engine.value}-{workers}.jsonl"
            if pair % 2 == 0:
                r, busy = runner(engine, workers, args, results)
                c = canonical(engine, workers, args, data)
            else:
                c = canonical(engine, workers, args, data)
                r, busy = runner(engine, workers, args, results)
            cell.ratios.append(r / c)
            cell.contended += busy
            print(f"  {engine.value} np={workers} pair {pair + 1}: {r / c:.3f}", flush=True)
        return cell
    for n in range(args.launches):
        if args.mode == "turns":
            times = turns(engine, workers, args, data, tmp)
            pairs = [c / r for r, c in times]  # same samples a step: a throughput ratio
            med = float(np.median(pairs))
            cell.times.extend(times)
        else:
            pairs, med = interleaved(engine, workers, args, data)
        cell.ratios.extend(pairs)
        cell.per_launch.append(med)
        print(f"  {engine.value} np={workers} launch {n + 1}: {med:.3f}", flush=True)
    return cell


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
    p.add_argument("--mode", choices=("turns", "interleaved", "launches"), default="turns")
    p.add_argument("--engines", default="horovod,ddp,paddle")
    p.add_argument("--workers", default="1,2")
    p.add_argument("--launches", type=int, help="turns (default 6), interleaved (3)")
    p.add_argument(
        "--pairs",
        type=int,
        help="window pairs per launch (interleaved, default 150) or "
        "pairs of launches (launches, default 12)",
    )
    p.add_argument("--steps", type=int, help="turns/launches: timed steps (1200 / 400)")
    p.add_argument("--warmup-steps", type=int, help="default 16 for turns, else 20")
    p.add_argument("--window-steps", type=int, help="default 16 for turns, else 20")
    p.add_argument("--slow-runner-ms", type=float, help="add MS to every runner step")
    p.add_argument(
        "--aa", action="store_true", help="turns: the canonical loop against itself (A/A)"
    )
    args = p.parse_args()
    # stopped launches must not outlive this script: SIGTERM and SIGHUP unwind like Ctrl-C,
    # through take_turns' clean-up (which resumes and kills them)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda num, _: sys.exit(128 + num))
    if args.slow_runner_ms:  # the canonical loops never read it
        os.environ["BENCH_TEST_FAULT"] = f"delay:rank=0,ms={args.slow_runner_ms}"
    turns_mode = args.mode == "turns"  # 16-step windows end the runner's epochs exactly
    args.steps = args.steps or (1200 if turns_mode else 400)
    args.warmup_steps = args.warmup_steps or (16 if turns_mode else 20)
    args.window_steps = args.window_steps or (16 if turns_mode else 20)
    args.launches = args.launches or (6 if turns_mode else 3)
    if args.pairs is None:
        args.pairs = 150 if args.mode == "interleaved" else 12
    cells = []
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data.npz"
        write_data(data)
        for workers in (int(w) for w in args.workers.split(",")):
            for engine in (Engine(e) for e in args.engines.split(",")):
                cells.append(measure(engine, workers, args, data, Path(tmp)))
                est = decision(cells[-1])
                print(f"{engine.value:8} np={workers}  ratio {est.fmt('.3f')}  {verdict(est)}")
    table(cells, args.mode)
    return 0


def decision(cell: Cell) -> stats.Estimate:
    """turns: launches are the unit (each process has its own luck: placement, alignment,
    huge pages), so the interval is over the per-launch medians, never the pooled pairs."""
    return stats.estimate(cell.per_launch if cell.times else cell.ratios)


def table(cells: list[Cell], mode: str) -> None:
    if mode == "turns":
        head = "launches | per-launch medians | pairs pooled | mean-based [bootstrap]"
    else:
        head = "contended" if mode == "launches" else "per-launch medians"
    print(
        f"\n| engine | workers | runner / canonical | 95% interval | half-width | verdict | {head} |"
    )
    print("|---|---|---|---|---|---|---|" + ("---|---|---|" if mode == "turns" else ""))
    for cell in cells:
        est = decision(cell)
        half = stats.relative_half_width(est)
        width = "-" if half is None else f"{half:.1%}"
        print(
            f"| {cell.engine} | {cell.workers} | {est.value:.3f} | {est.interval('.3f')} | "
            f"{width} | {verdict(est)} | {cell.extra()} |"
        )


if __name__ == "__main__":
    sys.exit(main())
