"""Does profiling change the throughput a record reports? Paired launches with and without.

    .venv/bin/python tests/benchmarks/profile_cost.py [--engines horovod,ddp,paddle]
        [--workers 2] [--model lenet] [--pairs 8] [--steps 200]

Each pair launches the same runner twice back to back, in alternating order: once
with `--profile-steps 0` (no breakdown, no probe armed: Horovod starts without its
dynamic timeline) and once with the default profiled steps. The profiled steps come
after every timed window, so the reported throughput should not move; this measures
it. One ratio (profiled / not) of reported throughputs per pair; the 95% interval is
the suite's interval over pairs. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import engines
from bench.engines import Engine
from bench.measure import stats
from bench.measure.window import Measure
from tests.benchmarks.independent_overhead import launch_record


def launch(engine: Engine, args: argparse.Namespace, results: Path, profile: int) -> float:
    argv = engines.local_argv(engine, args.workers, [
        "--model", args.model, "--batch-size", "32", "--threads", "1", "--epochs", "1000",
        "--max-steps", str(args.steps), "--lr-schedule", "constant",
        "--profile-steps", str(profile), "--results", str(results), "--quiet",
    ])  # fmt: skip
    rec = launch_record(argv, results, engine)
    assert ("breakdown" in rec) == (profile > 0), "the record disagrees with --profile-steps"
    return float(rec.get("throughput") or "nan")


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--engines", default="horovod,ddp,paddle")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--model", default="lenet")
    p.add_argument("--pairs", type=int, default=8)
    p.add_argument("--steps", type=int, default=200)
    args = p.parse_args()
    on = Measure().profile_steps
    print("| engine | workers | profiled / not | 95% interval | pairs |\n|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for engine in (Engine(e) for e in args.engines.split(",")):
            results, ratios = Path(tmp) / f"{engine.value}.jsonl", []
            for pair in range(args.pairs):
                order = (0, on) if pair % 2 == 0 else (on, 0)
                tput = {n: launch(engine, args, results, n) for n in order}
                ratios.append(tput[on] / tput[0])
            est = stats.estimate(ratios)
            print(f"| {engine.value} | {args.workers} | {est.value:.3f} | "
                  f"{est.interval('.3f')} | {est.n} |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
