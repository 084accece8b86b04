"""`bench collectives`: allreduce latency and bus bandwidth of each engine, on its own launcher."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from bench import engines, records
from bench.cli.common import (
    EXIT_BAD_INPUT,
    DefaultsOnce,
    engine_names,
    stop_on_signals,
    stopped_status,
)
from bench.core.errors import BenchError, Interrupted
from bench.launch import netns
from bench.measure.allreduce import DEFAULT_SIZES
from bench.render import formats, textfit
from bench.sweep import allreduce
from bench.sweep.allreduce import Plan
from bench.tables import busbw

DESCRIPTION = (
    "Time a float32 sum-allreduce with each engine's own call, under its own launcher; "
    "every argument is checked before anything is launched."
)
FORMATTER = DefaultsOnce


def add_arguments(p: argparse.ArgumentParser) -> None:
    every = ",".join(e.value for e in engines.Engine)
    p.add_argument("--engines", type=engine_names, default=every, help=f"comma list of {every}")
    p.add_argument("--workers", default="2", help="worker counts, comma list")
    p.add_argument(
        "--sizes",
        default=",".join(str(n) for n in DEFAULT_SIZES),
        help="message sizes in bytes (integers, multiples of 4), comma list; 4 KiB .. 64 MiB",
    )
    p.add_argument("--iters", default="20", help="timed iterations per size")
    p.add_argument("--threads", default="1", help="threads per worker")
    p.add_argument(
        "--device",
        choices=["auto", "cpu", "cuda"],
        default="auto",
        help="auto: cuda where a CUDA GPU is visible, else cpu (as the runners)",
    )
    p.add_argument("--timeout", default="300", help="seconds allowed per cell")
    p.add_argument(
        "--emulate-link",
        dest="emulate_link",
        metavar="RATE",
        help="root only: measure across two local network namespaces whose link is shaped "
        "with tc tbf to RATE (e.g. 200mbit, 1gbit); the table gives busbw as a fraction of it",
    )
    p.add_argument("--results", default="results", help="results directory")
    p.add_argument("--dry-run", action="store_true", help="print the launch commands and exit")


def run(args: argparse.Namespace) -> int:
    try:
        plan = Plan.parse(
            engines=",".join(args.engines),
            workers=args.workers,
            sizes=args.sizes,
            iters=args.iters,
            threads=args.threads,
            device=args.device,
            timeout=args.timeout,
            emulate_link=args.emulate_link,
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    # absolute: launchers run from the repository root, in the namespaces too
    results = Path(args.results).resolve()
    if args.dry_run:
        return _dry_run(plan, results)
    try:
        with stop_on_signals():
            statuses = _measure(plan, results)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (KeyboardInterrupt, Interrupted) as exc:
        why, status = stopped_status(exc)
        print(f"\nbench collectives: stopped by {why}; what was recorded is kept", file=sys.stderr)
        return status
    loaded = records.load([records.results_file(args.results).parent / records.COLLECTIVES_FILE])
    print()
    print(formats.collectives_text(busbw.tables(loaded.records), textfit.width()))
    return 0 if all(s == records.Status.OK for s in statuses) else 1


def _needs_ssh(plan: Plan) -> bool:
    return any(engines.get(e).needs_ssh for e in plan.engines)


def _dry_run(plan: Plan, results: Path) -> int:
    cluster = None
    if plan.link_bps:
        cluster = netns.cluster(netns.planned(_needs_ssh(plan), plan.link_bps), max(plan.workers))
    for argv in allreduce.dry_run(plan, results, cluster):
        print(shlex.join(argv))
    print(f"# {len(plan.engines) * len(plan.workers)} cells", file=sys.stderr)
    return 0


def _measure(plan: Plan, results: Path) -> list[records.Status]:
    if not plan.link_bps:
        return allreduce.run(
            plan.engines, plan.workers, results, timeout=plan.timeout, extra=plan.extra()
        )
    # the pair is removed on the way out, Ctrl-C and SIGTERM included
    with netns.shaped_pair(_needs_ssh(plan), plan.link_bps) as hosts:
        return allreduce.run(
            plan.engines,
            plan.workers,
            results,
            timeout=plan.timeout,
            extra=plan.extra(),
            cluster=netns.cluster(hosts, max(plan.workers)),
            link_bps=plan.link_bps,
        )
