"""`bench run`: engines x worker counts x models x repeats, each cell through its launcher."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import engines, records
from bench.cli import compare_tables
from bench.cli.common import (
    EXIT_BAD_INPUT,
    comma_list,
    engine_names,
    hide_flags,
    parse_budget,
    parse_precision,
    stop_on_signals,
    stopped_status,
)
from bench.contract.flags import add_spec_flags, spec_from_args
from bench.contract.spec import RunSpec
from bench.core.errors import BenchError, Interrupted, SpecError, SweepError
from bench.decide.pairs import DEFAULT_PRECISION
from bench.launch import slurm
from bench.launch.cluster import DEFAULT_REMOTE_SHELL
from bench.measure import contention, peak
from bench.measure.window import add_measure_flags
from bench.sweep import emulate, submit, until_decided
from bench.sweep.cells import Cell, check_plan, plan
from bench.sweep.config import LAUNCHERS, SLURM, SweepConfig, load_config_file
from bench.sweep.execute import CellResult, cell_argv, cell_log_dir, environment_key, run_sweep

DESCRIPTION = (
    "Run every cell of a sweep (engines x workers x models x repeats) through each engine's "
    "own launcher, each with a time-out and exactly one record; cells already recorded are "
    "skipped. Then print the comparison."
)
# Sweep settings a flag may set (dest = SweepConfig field); unset flags stay None.
SETTINGS = [f.name for f in dataclasses.fields(SweepConfig)]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="TOML or YAML file with sweep settings and a [spec] table")
    _sweep_flags(p)
    _multi_node_flags(p)
    _slurm_flags(p)
    add_measure_flags(p)
    p.add_argument("--results", default="results", help="results directory (default: results/)")
    p.add_argument("--force", action="store_true", help="rerun cells already recorded")
    p.add_argument("--dry-run", action="store_true", help="print the launch commands and exit")
    p.add_argument(
        "--no-compare", action="store_true", help="do not print the comparison at the end"
    )
    p.add_argument(
        "--aa",
        action="store_true",
        default=None,
        help="an A/A experiment: every cell twice a repeat, as A and as B, compared as two "
        "engines (what 'different' between identical sides means: noise)",
    )
    p.add_argument(
        "--decide-at",
        help="after the repeats, add launches until every head-to-head is decided at this "
        "precision (e.g. 5%%: faster, slower, or equivalent within 5%%) or the budget is "
        "spent (docs/methodology.md#decided-not-only-measured)",
    )
    p.add_argument(
        "--budget", help="with --decide-at: stop adding launches after this time (e.g. 20m, 1h)"
    )
    add_spec_flags(p)
    # a sweep takes --models and --datasets; --model and --dataset parse only to be refused
    hide_flags(p, ("model", "dataset"))


def _sweep_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--engines",
        type=engine_names,
        help=f"comma list of {','.join(engines.Engine)} (default: all). An engine not installed "
        "here has its cells recorded as unavailable, the others run; exit status 1 if it was named",
    )
    p.add_argument(
        "--workers", type=comma_list(int), help="comma list of worker counts (default: 1,2)"
    )

    p.add_argument(
        "--models", type=comma_list(str), help="comma list of models (default: mlp,lenet)"
    )
    p.add_argument(
        "--datasets",
        type=comma_list(str),
        help="comma list of datasets (default: each model's own)",
    )
    p.add_argument("--repeats", type=int, help="runs per cell (default: 3)")
    p.add_argument(
        "--seed-mode",
        choices=["vary", "fixed"],
        help="vary: seed+repeat per repeat (noise over seeds); fixed: timing noise only",
    )
    p.add_argument("--timeout", type=float, help="seconds allowed per cell (default: 600)")
    p.add_argument(
        "--oversubscribe",
        action="store_true",
        default=None,
        help="allow more worker threads than cores",
    )
    p.add_argument(
        "--no-comm-cost",
        dest="comm_cost",
        action="store_false",
        default=None,
        help="skip the compute-only (grad_sync=false) twins of multi-worker cells",
    )
    p.add_argument(
        "--engine-option",
        dest="engine_options",
        action="append",
        default=None,
        metavar="ENGINE:KEY=VALUE",
        help="engine-specific option for that engine's cells, e.g. horovod:adasum=true",
    )
    if engines.trace_flags():  # spelled by the engines that have a trace
        p.add_argument(
            *engines.trace_flags(),
            dest="engine_traces",
            action="store_true",
            default=None,
            help="keep each engine's own trace where it has one (Horovod's timeline) in every "
            "cell's log folder, summarised in the record",
        )


def _multi_node_flags(p: argparse.ArgumentParser) -> None:
    multi = p.add_argument_group(
        "multi-node",
        "spread every cell's workers evenly over several hosts (same repo path on each)",
    )
    multi.add_argument("--hosts", help="HOST:SLOTS,HOST:SLOTS; the first host holds rank 0")
    multi.add_argument("--hostfile", help="file with one 'HOST slots=N' (or HOST:N) per line")
    multi.add_argument(
        "--remote-shell",
        dest="remote_shell",
        help=f"command prefix that runs a shell command on {{host}} (default: {DEFAULT_REMOTE_SHELL!r})",
    )
    multi.add_argument(
        "--iface", help="network interface for the collectives on every host (e.g. eth1)"
    )
    multi.add_argument(
        "--master-port", dest="master_port", type=int, help="rendezvous port (default: 29400)"
    )
    multi.add_argument(
        "--ssh-port", dest="ssh_port", type=int, help="ssh port horovodrun uses between hosts"
    )
    multi.add_argument(
        "--ssh-identity-file", dest="ssh_identity", help="ssh key horovodrun uses between hosts"
    )
    multi.add_argument(
        "--emulate-link",
        dest="emulate_link",
        metavar="RATE",
        help="root only: run each cell's workers across two local network namespaces whose "
        "link is shaped with tc tbf to RATE (e.g. 200mbit, 1gbit, 25gbit) in both directions; "
        "default workers 2",
    )


def _slurm_flags(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group(
        "Slurm", "run the cells as job steps of a Slurm allocation, or submit the sweep with sbatch"
    )
    group.add_argument(
        "--launcher",
        choices=list(LAUNCHERS),
        help="slurm: every cell as job steps of this allocation (the default inside one, "
        "when SLURM_JOB_ID is set); local: launchers on this machine",
    )
    group.add_argument(
        "--submit",
        action="store_true",
        help="write an sbatch script for this sweep under RESULTS/slurm/ and submit it "
        "(with --dry-run: print the script)",
    )
    group.add_argument(
        "--sbatch-arg",
        dest="sbatch_args",
        action="append",
        default=[],
        metavar="OPTION",
        help="an sbatch option for --submit, replacing the derived one of that name, "
        "e.g. --sbatch-arg=--partition=gpu --sbatch-arg=--nodes=2",
    )


def sweep_inputs(args: argparse.Namespace) -> tuple[SweepConfig, RunSpec, submit.Submission]:
    """The sweep, its base spec, and what the user gave (for a submission), from the
    parsed flags on top of the config file's settings and [spec] table."""
    settings, spec_fields = load_config_file(args.config) if args.config else ({}, {})
    # A sweep sets the model and dataset per cell from its lists; a single value given
    # the runners' way would be silently overridden, so it is refused with the right name.
    for one, many in (("model", "models"), ("dataset", "datasets")):
        if getattr(args, one) is not None:
            raise SweepError(
                f"bench run takes --{many} (a comma list, e.g. --{many} "
                f"{getattr(args, one)}), not --{one}"
            )
    settings.update({k: getattr(args, k) for k in SETTINGS if getattr(args, k, None) is not None})
    given_spec = {
        **spec_fields,
        **{
            k: v
            for k, v in vars(args).items()
            if k in RunSpec.__dataclass_fields__ and v is not None
        },
    }
    job = submit.Submission(dict(settings), given_spec, args.force, args.no_compare)
    if "launcher" not in settings and os.environ.get("SLURM_JOB_ID") and not args.submit:
        settings["launcher"] = SLURM  # inside an allocation: its nodes, as job steps
    config = SweepConfig.from_dict(settings)
    for one, many in (("model", "models"), ("dataset", "datasets")):
        if one in spec_fields:
            raise SweepError(
                f"config file {args.config}: [spec] {one} is set per cell by the sweep; "
                f"write `{many} = [{json.dumps(spec_fields[one])}]` at the top level instead"
            )
    base = spec_from_args(args, RunSpec.from_dict(spec_fields))
    _check_base(base, args)
    return config, base, job


def _check_base(base: RunSpec, args: argparse.Namespace) -> None:
    """The spec every cell starts from, checked once and blamed on what the user typed:
    `--bucket-mb must be > 0`, not one cell by its field name."""
    try:
        base.validate()
    except SpecError as exc:
        message = str(exc)
        field = message.split(" ", 1)[0].split("=", 1)[0]
        if field not in RunSpec.__dataclass_fields__:
            raise
        flag = "--" + field.replace("_", "-")
        where = flag if getattr(args, field, None) is not None else f"[spec] {field}"
        if where.startswith("[spec]") and args.config:
            where = f"config file {args.config}: {where}"
        raise SweepError(where + message[len(field) :]) from None


def run(args: argparse.Namespace) -> int:
    try:
        config, base, job = sweep_inputs(args)
        # absolute: launchers run from the repository root, remote ones on other hosts
        results = Path(args.results).resolve()
        if args.budget and not args.decide_at:
            raise SweepError("--budget goes with --decide-at (e.g. --decide-at 5% --budget 20m)")
        if args.decide_at and (args.submit or args.force):
            raise SweepError(
                "--decide-at decides from the launches recorded so far: run it without "
                f"--{'submit' if args.submit else 'force'}"
            )
        if args.decide_at:  # checked before anything runs
            parse_precision(args.decide_at)
            if args.budget:
                parse_budget(args.budget)
        if args.submit:
            return _submit(args, config, base, job, results)
        if args.sbatch_args:
            raise SweepError("--sbatch-arg goes with --submit; add --submit or drop it")
        if config.launcher == SLURM:
            explicit = args.launcher is not None or not os.environ.get("SLURM_JOB_ID")
            print(slurm.note(slurm.allocation(), explicit), file=sys.stderr)
        if args.dry_run:
            return _dry_run(config, base, results)
        warning = contention.busy_warning(contention.machine_busy())
        if warning:
            print(f"bench run: {warning}", file=sys.stderr)
        peak_first = functools.partial(_measure_peak, base, results, not warning)
        with stop_on_signals():
            if config.emulate_link:
                # the pair is removed on the way out, Ctrl-C and SIGTERM included
                with emulate.emulated(config) as on_link:
                    outcomes = _execute(args, on_link, base, results, peak_first)
            else:
                outcomes = _execute(args, config, base, results, peak_first)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (KeyboardInterrupt, Interrupted) as exc:
        why, status = stopped_status(exc)
        what = "the running cell was killed and recorded, " if isinstance(exc, Interrupted) else ""
        print(
            f"\nbench run: stopped by {why}; {what}what was recorded is kept, rerun to resume",
            file=sys.stderr,
        )
        return status
    return _finish(args, outcomes, results)


def _execute(
    args: argparse.Namespace,
    config: SweepConfig,
    base: RunSpec,
    results: Path,
    before: Callable[[], None],
) -> list[CellResult]:
    """The sweep's cells; with --decide-at, then launches until decided (or the budget)."""

    precision = parse_precision(args.decide_at) if args.decide_at is not None else None
    # the loop's runs say so: compare reads their pairs at its looks, not with one look
    labels = {"decide_at": precision} if precision is not None else None

    def run_cells(cells: list[Cell] | None) -> list[CellResult]:
        return run_sweep(
            config,
            base,
            results,
            force=args.force,
            before_cells=before,
            cells=cells,
            extra_labels=labels,
        )

    if precision is None:
        return run_cells(None)
    budget = parse_budget(args.budget) if args.budget else None
    return until_decided.run(config, base, results, precision, budget, run_cells)


def _measure_peak(base: RunSpec, results: Path, quiet_machine: bool) -> None:
    """The machine's matmul peak at the sweep's threads, before any cell (so alone on the
    machine), cached beside the results for the records to name; its absence is no error.
    A busy machine would understate it, so there only a cached peak is used."""
    device = "cuda" if base.device.value == "cuda" else "cpu"
    folder = records.results_file(results).parent
    try:
        entry = peak.ensure(
            folder, base.threads, base.precision.value, device, may_measure=quiet_machine
        )
    except (ImportError, RuntimeError, OSError) as exc:
        entry, why = None, f"it could not be measured ({exc})"
    else:
        why = "the machine is busy; run bench peak on a quiet machine"
    if entry is None:
        print(f"bench run: no utilisation: no peak cached and {why}", file=sys.stderr)
        return
    print(
        f"bench run: peak {entry['gflops']:,.1f} GFLOP/s ({entry['key']}; "
        f"{peak.provenance(entry)})",
        file=sys.stderr,
    )


def _finish(args: argparse.Namespace, outcomes: list[CellResult], results: Path) -> int:
    """The comparison, then the exit status: 1 when a cell failed or nothing could run."""
    absent = [o for o in outcomes if o.status == records.Status.UNAVAILABLE]
    bad = [o for o in outcomes if o.status not in (records.Status.OK, records.Status.UNAVAILABLE)]
    if not args.no_compare:
        print()
        precision = parse_precision(args.decide_at) if args.decide_at else None
        compare_tables.print_tables(
            [str(records.results_file(results))],
            "text",
            False,
            precision=precision or DEFAULT_PRECISION,
        )
    if bad:
        print(f"bench run: {len(bad)} of {len(outcomes)} cells did not finish ok", file=sys.stderr)
        return 1
    # Engines absent from the default list are reported, not fatal; one the user named
    # is not what was asked for, and a sweep where nothing could run measured nothing.
    named = {o.cell.engine.value for o in absent} & set(_named_engines(args))
    if named or (absent and len(absent) == len(outcomes)):
        what = ", ".join(sorted(named)) if named else "every engine"
        print(
            f"bench run: {what} not installed here: {len(absent)} cells recorded as "
            "unavailable; install it or leave it out of --engines",
            file=sys.stderr,
        )
        return 1
    return 0


def _dry_run(config: SweepConfig, base: RunSpec, results: Path) -> int:
    """Print every cell's exact launch commands; nothing runs, nothing is written."""
    if config.emulate_link:
        config = emulate.planned(config)
    cells = plan(config, base)
    # the plan may be meant for a GPU machine: print it here all the same
    unavailable = check_plan(cells, config, devices=False)
    env_key = environment_key()
    for engine, why in unavailable.items():
        print(f"bench run: WARNING: engine {engine.value} unavailable: {why}", file=sys.stderr)
    for i, cell in enumerate(cells, start=1):
        if cell.engine in unavailable:
            print(f"# unavailable, recorded without launching: {cell.name}")
            continue
        log_dir = cell_log_dir(results / "runs" / "DRY-RUN", i, cell)
        labels: dict[str, Any] = {"cell": cell.key(env_key)}
        nodes = cell_argv(cell, results, log_dir, labels, config.timeout, config.engine_traces)
        _print_cell(i, cell, nodes)
    print(f"# {len(cells)} cells", file=sys.stderr)
    return 0


def _print_cell(i: int, cell: Cell, nodes: list[Any]) -> None:
    if not cell.cluster and not cell.allocation:
        print(shlex.join(nodes[0].argv))
        return
    print(f"# cell {i}: {cell.name}")
    if cell.allocation:
        for node in nodes:
            print(shlex.join(node.argv))
        return
    assert cell.cluster is not None
    for n, node in enumerate(nodes):
        where = f"node {n} of {len(nodes)}"
        if len(nodes) < len(cell.cluster.hosts):  # e.g. horovodrun, by ssh
            where = f"{engines.get(cell.engine).launcher} starts the other hosts' workers itself"
        print(f"# on {node.host.name} ({where}):")
        print(shlex.join(node.command))


def _submit(
    args: argparse.Namespace,
    config: SweepConfig,
    base: RunSpec,
    job: submit.Submission,
    results: Path,
) -> int:
    """`bench run --submit`: the sweep as an sbatch script, submitted (or printed)."""
    script, config_text, config_file = submit.prepare(job, config, base, results, args.sbatch_args)
    if args.dry_run:
        print(script, end="")
        print(f"# the job's sweep config, written to {config_file} on submission:")
        print("".join(f"#   {line}\n" for line in config_text.splitlines()), end="")
        return 0
    job_id, path = submit.submit(script, config_text, config_file, results)
    print(f"bench run: submitted Slurm job {job_id} (script {path}, sweep config {config_file})")
    print(f"bench run: its output goes to {results / 'slurm' / f'slurm-{job_id}.out'}")
    return 0


def _named_engines(args: argparse.Namespace) -> list[str]:
    """The engines the user named (--engines, or the config file's engines), if any."""
    if args.engines is not None:
        return list(args.engines)
    if args.config:
        named = load_config_file(args.config)[0].get("engines") or []
        return [named] if isinstance(named, str) else [str(e) for e in named]
    return []
