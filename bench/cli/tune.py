"""`bench tune`: each engine's communication knobs searched within a budget, then its
default and tuned settings measured afresh, side by side (bench/sweep/tune.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from bench import engines, records
from bench.cli.common import EXIT_BAD_INPUT, engine_names, stop_on_signals, stopped_status
from bench.contract.flags import add_spec_flags, spec_from_args
from bench.contract.spec import RunSpec
from bench.core.errors import BenchError, Interrupted
from bench.measure.window import add_measure_flags
from bench.render import formats, textfit
from bench.sweep import tune
from bench.sweep.config import SweepConfig
from bench.tables import tuning

DESCRIPTION = (
    "Search each engine's communication knobs that leave the maths unchanged (DDP's "
    "bucket size, Horovod's fusion threshold and cycle time, Paddle's comm buffer) by "
    "successive halving within a time budget, every trial an ordinary record labelled "
    "tuning=trial; then run the default and the winner afresh, alternated, and print "
    "them side by side. bench compare shows the same table."
)
# Steps of each fresh run unless --max-steps is given (the spec's default, whole epochs,
# would spend the budget on a few runs).
FRESH_STEPS = 200


def add_arguments(p: argparse.ArgumentParser) -> None:
    every = ",".join(e.value for e in engines.Engine)
    p.add_argument("--engines", type=engine_names, help=f"comma list of {every} (default: all)")
    p.add_argument("--workers", type=int, default=2, help="workers per run (default: 2)")
    p.add_argument(
        "--budget-min",
        type=float,
        default=10.0,
        help="minutes for the whole tuning, fresh runs included (default: 10)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="fresh runs of the default and of the winner each (default: 3)",
    )
    p.add_argument(
        "--trial-steps",
        type=int,
        default=40,
        help="steps of a first-rung trial; each later rung doubles it (default: 40)",
    )
    p.add_argument("--timeout", type=float, default=600.0, help="seconds allowed per run")
    p.add_argument("--results", default="results/tune", help="where the records go")
    add_measure_flags(p)
    add_spec_flags(p, RunSpec(max_steps=FRESH_STEPS))  # the help says what tune does


def run(args: argparse.Namespace) -> int:
    try:
        config, base, results = _plan(args)
        t = tune.Tuner(config, base, results, 60 * args.budget_min, args.trial_steps, args.repeats)
        t.say(
            f"bench tune {t.tune_id}: {base.model} at {args.workers} workers, "
            f"budget {args.budget_min:g} min; records in {results}"
        )
        with stop_on_signals():
            tune.tune(t, config.engines)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (KeyboardInterrupt, Interrupted) as exc:
        why, status = stopped_status(exc)
        print(f"\nbench tune: stopped by {why}; what was recorded is kept", file=sys.stderr)
        return status
    table = tuning.rows(records.load([results]).records, tune_id=t.tune_id)
    minutes = t.elapsed() / 60
    text = formats.tuning_text(table, textfit.width())
    print(f"\nbest against best ({minutes:.1f} min):\n" + text)
    return 0


def _plan(args: argparse.Namespace) -> tuple[SweepConfig, RunSpec, Path]:
    """The sweep settings, the base spec and the results folder, every argument checked."""
    if args.budget_min <= 0 or args.repeats < 2 or args.workers < 2:
        raise BenchError(
            "--budget-min must be > 0, --repeats >= 2 (an interval needs two runs) and "
            "--workers >= 2 (one worker has no communication to tune)"
        )
    # one model (--model, default lenet); fresh runs take --max-steps, FRESH_STEPS unless given
    base = spec_from_args(args)
    base = base.replace(max_steps=base.max_steps or FRESH_STEPS)
    config = SweepConfig.from_dict(_settings(args, base.model))
    if args.trial_steps <= base.warmup_steps:
        raise BenchError(
            f"--trial-steps {args.trial_steps} must exceed the {base.warmup_steps} warm-up "
            "steps (--warmup-steps), or a trial times nothing"
        )
    results = Path(args.results).resolve()
    records.check_writable(results)
    return config, base, results


def _settings(args: argparse.Namespace, model: str) -> dict[str, Any]:
    """Every run's sweep settings: one repeat of one model, no compute-only twins, the
    measurement flags given; --engines, else every registered engine."""
    settings: dict[str, Any] = {} if args.engines is None else {"engines": list(args.engines)}
    settings.update(
        workers=[args.workers], models=[model], repeats=1, timeout=args.timeout, comm_cost=False
    )
    measure = ("window_steps", "target_ci", "measure_cap_s", "profile_steps", "trace_steps")
    settings.update({k: getattr(args, k) for k in measure if getattr(args, k) is not None})
    return settings
