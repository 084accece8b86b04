"""The `bench` command: run sweeps, compare results, list models."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shlex
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import models
from bench import engines, launch, records, slurm
from bench.engines import Engine
from bench.netns import LinkError
from bench.spec import RunSpec, SpecError, add_spec_flags, spec_from_args
from bench.sweep import Interrupted, SweepConfig, SweepError, load_config_file, run_sweep

EXIT_BAD_INPUT = 2
# bench.report's DEFAULT_TARGET, repeated so that `bench --help` need not import pandas
# (tests/test_imports.py checks that the two agree)
DEFAULT_TARGET = 0.95


def _csv(kind: type) -> Callable[[str], tuple[object, ...]]:
    def parse(text: str) -> tuple[object, ...]:
        try:
            return tuple(kind(part.strip()) for part in text.split(",") if part.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated list of {kind.__name__}, got {text!r}"
            ) from None

    return parse


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bench",
        description="Benchmark data-parallel training engines under identical settings.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="sweep engines x workers x models x repeats, then compare")
    run.add_argument("--config", help="TOML or YAML file with sweep settings and a [spec] table")
    run.add_argument(
        "--engines",
        type=_csv(str),
        help=f"comma list of {','.join(Engine)} (default: all). An engine not installed here "
        "has its cells recorded as unavailable, the others run; exit status 1 if it was named",
    )
    run.add_argument("--workers", type=_csv(int), help="comma list of worker counts (default: 1,2)")
    run.add_argument("--models", type=_csv(str), help="comma list of models (default: mlp,lenet)")
    run.add_argument(
        "--datasets", type=_csv(str), help="comma list of datasets (default: each model's own)"
    )
    run.add_argument("--repeats", type=int, help="runs per cell (default: 3)")
    run.add_argument(
        "--seed-mode",
        choices=["vary", "fixed"],
        help="vary: seed+repeat per repeat (noise over seeds); fixed: timing noise only",
    )
    run.add_argument("--timeout", type=float, help="seconds allowed per cell (default: 600)")
    run.add_argument(
        "--oversubscribe",
        action="store_true",
        default=None,
        help="allow more worker threads than cores",
    )
    run.add_argument(
        "--no-comm-cost",
        dest="comm_cost",
        action="store_false",
        default=None,
        help="skip the compute-only (grad_sync=false) twins of multi-worker cells",
    )
    run.add_argument(
        "--engine-option",
        dest="engine_options",
        action="append",
        default=None,
        metavar="ENGINE:KEY=VALUE",
        help="engine-specific option for that engine's cells, e.g. horovod:adasum=true",
    )
    run.add_argument(
        "--hvd-timeline",
        dest="hvd_timeline",
        action="store_true",
        default=None,
        help="keep a Horovod timeline per horovod cell and summarise it in the record",
    )
    multi = run.add_argument_group(
        "multi-node",
        "spread every cell's workers evenly over several hosts (same repo path on each)",
    )
    multi.add_argument("--hosts", help="HOST:SLOTS,HOST:SLOTS; the first host holds rank 0")
    multi.add_argument("--hostfile", help="file with one 'HOST slots=N' (or HOST:N) per line")
    multi.add_argument(
        "--remote-shell",
        dest="remote_shell",
        help="command prefix that runs a shell command on {host} "
        f"(default: {launch.DEFAULT_REMOTE_SHELL!r})",
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
    slurm_group = run.add_argument_group(
        "Slurm",
        "run the cells as job steps of a Slurm allocation, or submit the sweep with sbatch",
    )
    slurm_group.add_argument(
        "--launcher",
        choices=list(slurm.LAUNCHERS),
        help="slurm: every cell as job steps of this allocation (the default inside one, "
        "when SLURM_JOB_ID is set); local: launchers on this machine",
    )
    slurm_group.add_argument(
        "--submit",
        action="store_true",
        help="write an sbatch script for this sweep under RESULTS/slurm/ and submit it "
        "(with --dry-run: print the script)",
    )
    slurm_group.add_argument(
        "--sbatch-arg",
        dest="sbatch_args",
        action="append",
        default=[],
        metavar="OPTION",
        help="an sbatch option for --submit, replacing the derived one of that name, "
        "e.g. --sbatch-arg=--partition=gpu --sbatch-arg=--nodes=2",
    )
    from runners.protocol import add_measure_flags

    add_measure_flags(run)
    run.add_argument("--results", default="results", help="results directory (default: results/)")
    run.add_argument("--force", action="store_true", help="rerun cells already recorded")
    run.add_argument("--dry-run", action="store_true", help="print the launch commands and exit")
    run.add_argument(
        "--no-compare", action="store_true", help="do not print the comparison at the end"
    )
    add_spec_flags(run)

    cmp_ = sub.add_parser(
        "compare",
        help="comparison tables from result records, or BASE/NEW changes",
        description="Tables over every record under PATHS (results/reference/ only when "
        "named), one comparison per spec, machine and library versions; or, with --base "
        "and --new, the change of each cell between two result sets.",
    )
    cmp_.add_argument(
        "paths",
        nargs="*",
        help="result files or directories for the tables (default: results/); a "
        "reference/ folder below a named directory is read only when named itself",
    )
    cmp_.add_argument(
        "--out",
        metavar="DIR",
        help="also write the report to DIR/report.<format> (html: one file); "
        "BASE NEW: DIR/diff.<format>",
    )
    cmp_.add_argument(
        "--base", metavar="PATH", help="regression mode: the result set to compare against"
    )
    cmp_.add_argument("--new", metavar="PATH", help="regression mode: the result set to check")
    cmp_.add_argument("--tables", action="store_true", help=argparse.SUPPRESS)  # the default now
    cmp_.add_argument(
        "--fail",
        action="append",
        default=[],
        metavar="METRIC:N%",
        help="with --base/--new: exit 1 when METRIC got significantly worse by more than N%% "
        "(throughput, accuracy, step_p50, peak_rss; repeatable)",
    )
    cmp_.add_argument(
        "--min-effect",
        type=float,
        default=None,
        help="with --base/--new: smallest relative change called significant (default: 0.03)",
    )
    cmp_.add_argument(
        "--format", choices=["text", "markdown", "csv", "json", "html"], default="text"
    )
    cmp_.add_argument(
        "--target-accuracy",
        type=float,
        default=DEFAULT_TARGET,
        help="accuracy for the time-to-target column (default: 0.95)",
    )
    cmp_.add_argument(
        "--sources", action="store_true", help="list the record (file:line) behind every run"
    )

    coll = sub.add_parser(
        "collectives",
        help="allreduce latency and bandwidth of each engine",
        description="Time a float32 sum-allreduce with each engine's own call, under its "
        "own launcher; every argument is checked before anything is launched.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    coll.add_argument(
        "--engines", default="horovod,ddp,paddle", help="comma list of horovod,ddp,paddle"
    )
    coll.add_argument("--workers", default="2", help="worker counts, comma list")
    coll.add_argument(
        "--sizes",
        default=",".join(str(n) for n in launch.COLLECTIVE_SIZES),
        help="message sizes in bytes (integers, multiples of 4), comma list; 4 KiB .. 64 MiB",
    )
    coll.add_argument("--iters", default="20", help="timed iterations per size")
    coll.add_argument("--threads", default="1", help="threads per worker")
    coll.add_argument(
        "--device",
        choices=["auto", "cpu", "cuda"],
        default="auto",
        help="auto: cuda where a CUDA GPU is visible, else cpu (as the runners)",
    )
    coll.add_argument("--timeout", default="300", help="seconds allowed per cell")
    coll.add_argument(
        "--emulate-link",
        dest="emulate_link",
        metavar="RATE",
        help="root only: measure across two local network namespaces whose link is shaped "
        "with tc tbf to RATE (e.g. 200mbit, 1gbit); the table gives busbw as a fraction of it",
    )
    coll.add_argument("--results", default="results", help="results directory")
    coll.add_argument("--dry-run", action="store_true", help="print the launch commands and exit")

    pred = sub.add_parser(
        "predict",
        help="model each engine's scaling from measured records (predictions, not measurements)",
        description="Fit, per engine and model, a model of step time (compute-only step time, "
        "ring all-reduce cost from bench collectives on the same link, the overlap measured) "
        "and predict throughput and efficiency at other worker counts and link rates. "
        "Writes records of kind 'prediction', which compare shows apart.",
    )
    pred.add_argument("paths", nargs="*", default=["results"], help="result files or directories")
    pred.add_argument("--workers", default="8,64,512", help="worker counts to predict, comma list")
    pred.add_argument(
        "--link", help="link rate to predict on, e.g. 25gbit (default: the fitted link)"
    )
    pred.add_argument("--fit-link", help="fit only runs over this emulated link rate, e.g. 500mbit")
    pred.add_argument("--engines", help="comma list of engines to fit (default: all measured)")
    pred.add_argument("--models", help="comma list of models to fit (default: all measured)")
    pred.add_argument(
        "--compute-ms",
        type=float,
        help="per-worker compute-only step time to use instead of the measured one "
        "(e.g. a GPU's, from the GPU check)",
    )
    pred.add_argument(
        "--grad-mb", type=float, help="gradient MB (2^20 bytes) per step instead of the model's"
    )
    pred.add_argument(
        "--busbw-fraction",
        type=float,
        help="bus bandwidth as a fraction of --link (default: the fraction measured)",
    )
    pred.add_argument(
        "--hop-latency-us",
        type=float,
        help="latency of one ring step in microseconds (default: measured latency / 2(n-1))",
    )
    pred.add_argument(
        "--what-if",
        metavar="MODEL",
        help="no records: the ring model alone for MODEL (a label) from stated inputs; needs "
        "--compute-ms, --grad-mb, --hidden-share, --link, --busbw-fraction, --hop-latency-us",
    )
    pred.add_argument(
        "--hidden-share",
        type=float,
        help="with --what-if: share of compute under which communication hides "
        "(0: none; about 0.67: all of the backward pass)",
    )
    pred.add_argument(
        "--bucket-mb", type=float, default=25.0, help="with --what-if: bucket/fusion MB"
    )
    pred.add_argument(
        "--batch", type=int, default=32, help="with --what-if: per-worker batch (samples)"
    )
    pred.add_argument(
        "--check",
        action="store_true",
        help="with --fit-link: predict every other measured link rate and print the error",
    )
    pred.add_argument(
        "--results",
        default="results",
        help="where predictions.jsonl is written (default: results/)",
    )
    pred.add_argument("--no-write", action="store_true", help="print only, write no records")

    exp = sub.add_parser("export", help="write records in another tool's format")
    exp.add_argument("paths", nargs="*", default=["results"], help="result files or directories")
    exp.add_argument(
        "--pytest-benchmark",
        metavar="FILE",
        required=True,
        help="pytest-benchmark JSON, readable by `pytest-benchmark compare FILE`",
    )

    sub.add_parser("models", help="list the reference models")
    return parser


def _sweep_inputs(args: argparse.Namespace) -> tuple[SweepConfig, RunSpec]:
    settings, spec_fields = load_config_file(args.config) if args.config else ({}, {})
    # A sweep sets the model and dataset per cell from its lists; a single value given
    # the runners' way would be silently overridden, so it is refused with the right name.
    for one, many in (("model", "models"), ("dataset", "datasets")):
        if getattr(args, one) is not None:
            raise SweepError(
                f"bench run takes --{many} (a comma list, e.g. --{many} "
                f"{getattr(args, one)}), not --{one}"
            )
    for key in (
        "engines",
        "workers",
        "models",
        "datasets",
        "repeats",
        "seed_mode",
        "timeout",
        "oversubscribe",
        "comm_cost",
        "engine_options",
        "hvd_timeline",
        "hosts",
        "hostfile",
        "remote_shell",
        "iface",
        "master_port",
        "ssh_port",
        "ssh_identity",
        "emulate_link",
        "launcher",
        "window_steps",
        "target_ci",
        "measure_cap_s",
    ):
        value = getattr(args, key)
        if value is not None:
            settings[key] = value
    if "launcher" not in settings and os.environ.get("SLURM_JOB_ID") and not args.submit:
        settings["launcher"] = slurm.SLURM  # inside an allocation: its nodes, as job steps
    config = SweepConfig.from_dict(settings)
    for one, many in (("model", "models"), ("dataset", "datasets")):
        if one in spec_fields:
            raise SweepError(
                f"config file {args.config}: [spec] {one} is set per cell by the sweep; "
                f"write `{many} = [{json.dumps(spec_fields[one])}]` at the top level instead"
            )
    base = spec_from_args(args, RunSpec.from_dict(spec_fields))
    return config, base


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP stop a sweep as Ctrl-C does: the running cell's process tree is
    killed and recorded, then `bench run` exits 128 + the signal's number."""

    def stop(signum: int, _frame: object) -> None:
        # A second signal must not cut the clean-up of the first short.
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        raise Interrupted(signum)

    old = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def cmd_run(args: argparse.Namespace) -> int:
    from bench.sweep import cell_argv, cell_log_dir, check_plan, environment_key, plan

    try:
        config, base = _sweep_inputs(args)
        # absolute: launchers run from the repository root, remote ones on other hosts
        results = Path(args.results).resolve()
        if args.submit:
            return _submit(args, config, base, results)
        if args.sbatch_args:
            raise SweepError("--sbatch-arg goes with --submit; add --submit or drop it")
        if config.launcher == slurm.SLURM:
            explicit = args.launcher is not None or not os.environ.get("SLURM_JOB_ID")
            try:
                print(slurm.note(slurm.allocation(), explicit), file=sys.stderr)
            except launch.LaunchError as exc:
                raise SweepError(str(exc)) from None
        if args.dry_run:
            if config.emulate_link:
                from bench import netns

                config = netns.sweep_config(config, netns.planned_hosts(config))
            cells = plan(config, base)
            # the plan may be meant for a GPU machine: print it here all the same
            unavailable = check_plan(cells, config, devices=False)
            env_key = environment_key()
            run_dir = results / "runs" / "DRY-RUN"
            for engine, why in unavailable.items():
                print(
                    f"bench run: WARNING: engine {engine.value} unavailable: {why}", file=sys.stderr
                )
            for i, cell in enumerate(cells, start=1):
                if cell.engine in unavailable:
                    print(f"# unavailable, recorded without launching: {cell.name}")
                    continue
                labels = {"cell": cell.key(env_key)}
                log_dir = cell_log_dir(run_dir, i, cell)
                nodes = cell_argv(
                    cell, results, log_dir, labels, config.timeout, config.hvd_timeline
                )
                if cell.allocation:
                    print(f"# cell {i}: {cell.name}")
                    for node in nodes:
                        print(shlex.join(node.argv))
                    continue
                if not cell.cluster:
                    print(shlex.join(nodes[0].argv))
                    continue
                print(f"# cell {i}: {cell.name}")
                for n, node in enumerate(nodes):
                    where = f"node {n} of {len(nodes)}"
                    if len(nodes) < len(cell.cluster.hosts):  # e.g. horovodrun, by ssh
                        launcher = engines.get(cell.engine).launcher
                        where = f"{launcher} starts the other hosts' workers itself"
                    print(f"# on {node.host.name} ({where}):")
                    print(shlex.join(node.command))
            print(f"# {len(cells)} cells", file=sys.stderr)
            return 0
        from bench import contention

        warning = contention.busy_warning(contention.machine_busy())
        if warning:
            print(f"bench run: {warning}", file=sys.stderr)
        with _stop_on_signals():
            if config.emulate_link:
                from bench import netns

                # the pair is removed on the way out, Ctrl-C and SIGTERM included
                with netns.emulated(config) as on_link:
                    outcomes = run_sweep(on_link, base, results, force=args.force)
            else:
                outcomes = run_sweep(config, base, results, force=args.force)
    except (SweepError, SpecError, records.RecordsError, LinkError, launch.LaunchError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(
            "\nbench run: interrupted; what was recorded is kept, rerun to resume", file=sys.stderr
        )
        return 130
    except Interrupted as exc:
        print(
            f"\nbench run: stopped by {exc.name}; the running cell was killed and recorded, "
            "what was recorded is kept, rerun to resume",
            file=sys.stderr,
        )
        return 128 + exc.signum
    absent = [o for o in outcomes if o.status == records.Status.UNAVAILABLE]
    bad = [o for o in outcomes if o.status not in (records.Status.OK, records.Status.UNAVAILABLE)]
    if not args.no_compare:
        print()
        _print_compare([str(records.results_file(results))], "text", False)
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


def _submit(args: argparse.Namespace, config: SweepConfig, base: RunSpec, results: Path) -> int:
    """`bench run --submit`: the sweep as an sbatch script, submitted (or printed)."""
    from bench.sweep import plan

    if args.launcher == slurm.LOCAL:
        raise SweepError("--submit runs the sweep with --launcher slurm; drop --launcher local")
    if config.hosts or config.hostfile:
        raise SweepError("--submit takes its hosts from the allocation; drop --hosts/--hostfile")
    # the sweep's size, planned as on one machine (the job's own nodes are not known yet)
    cells = plan(dataclasses.replace(config, launcher=slurm.LOCAL), base)
    script = slurm.sbatch_script(
        slurm.job_argv(args.raw_argv, results),
        results=results,
        workers=max(config.workers),
        threads=base.threads,
        cells=len(cells),
        timeout=config.timeout,
        extra=args.sbatch_args,
    )
    if args.dry_run:
        print(script, end="")
        return 0
    job, path = slurm.submit(script, results)
    print(f"bench run: submitted Slurm job {job} ({len(cells)} cells); script {path}")
    print(f"bench run: its output goes to {results / 'slurm' / f'slurm-{job}.out'}")
    return 0


def _named_engines(args: argparse.Namespace) -> list[str]:
    """The engines the user named (--engines, or the config file's engines), if any."""
    if args.engines is not None:
        return list(args.engines)
    if args.config:
        engines = load_config_file(args.config)[0].get("engines") or []
        return [engines] if isinstance(engines, str) else [str(e) for e in engines]
    return []


def render_compare(
    loaded: records.Loaded, fmt: str, target: float, figures: list[bytes] | None = None
) -> str | None:
    """The comparison of `loaded` in one format; None when nothing is comparable.

    For html, the figures' PNG bytes are appended to `figures` when it is given.
    """
    from bench import collectives, predict, report

    comps = report.compare(loaded.records, target)
    coll = collectives.tables(loaded.records)
    predicted = predict.render_text(loaded.records)  # model figures, shown apart
    if not comps and not coll and not predicted:
        return None
    if fmt == "html":
        from bench import html

        page = html.build(loaded.records, loaded.problems, target)
        if figures is not None:
            figures.extend(page.figures)
        return page.html
    out: list[str] = []
    if fmt == "json":
        data = [
            {
                "title": c.title,
                "group": c.group,
                "machine": c.machine,
                "libraries": c.libraries,
                "sections": {n: report.numeric_rows(c, n) for n in c.sections},
                "notes": c.notes,
            }
            for c in comps
        ]
        out.append(json.dumps(data, indent=1))
    elif fmt == "csv":  # one long table, numbers as numbers (pandas.read_csv reads it)
        out.append(report.long_table(comps).to_csv(index=False))
    elif fmt == "markdown":
        for c in comps:
            out.append(f"### {c.title}\n\nmachine: {c.machine} | {c.libraries}\n")
            for name, df in c.sections.items():
                if not df.empty:
                    out.append(f"**{name}**\n\n{report.formatted(df).to_markdown(index=False)}\n")
            out.append("\n".join(f"- {n}" for n in c.notes) + "\n")
        if predicted:
            table = predict.table(loaded.records).to_markdown(index=False)
            out.append(
                f"### Model predictions (not measurements)\n\n{predict.CAPTION}\n\n{table}\n"
            )
    else:
        out.extend(report.render_text(c) + "\n" for c in comps)
        if coll:
            out.append(collectives.render_text(coll) + "\n")
        if predicted:
            out.append(predicted + "\n")
    return "\n".join(out)


_SUFFIX = {"text": "txt", "markdown": "md", "csv": "csv", "json": "json", "html": "html"}


def _print_compare(
    paths: Sequence[str],
    fmt: str,
    sources: bool,
    target: float = DEFAULT_TARGET,
    out_dir: str | None = None,
) -> int:
    # Tables need no per-step arrays: read cached summaries; the html report plots them.
    loaded = records.load(paths) if fmt == "html" else records.load_summaries(paths)
    _report_skipped(loaded)
    figures: list[bytes] = []
    text = render_compare(loaded, fmt, target, figures)
    if text is None:
        print(
            f"no readable records under {', '.join(paths)}; run `bench run` or a runner first",
            file=sys.stderr,
        )
        return 1
    if out_dir:
        target_file = Path(out_dir) / f"report.{_SUFFIX[fmt]}"
        try:
            target_file.parent.mkdir(parents=True, exist_ok=True)
            target_file.write_text(text)
            for i, png in enumerate(figures, start=1):
                (target_file.parent / f"figure-{i}.png").write_bytes(png)
        except OSError as exc:
            print(f"error: cannot write {target_file}: {exc.strerror}", file=sys.stderr)
            return EXIT_BAD_INPUT
        print(f"wrote {target_file}", file=sys.stderr)
    if fmt != "html" or not out_dir:
        print(text)
    if sources:
        cols = [
            "group",
            "engine",
            "workers",
            "seed",
            "grad_sync",
            "status",
            "throughput",
            "final_accuracy",
            "source",
        ]
        from bench import report

        df = report.frame(loaded.records)
        print(df[cols].sort_values(cols[:5]).to_string(index=False))
    print(f"{len(loaded.records)} records read, {len(loaded.problems)} skipped", file=sys.stderr)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    if args.base is not None or args.new is not None:
        if args.base is None or args.new is None:
            print("error: regression mode needs both --base PATH and --new PATH", file=sys.stderr)
            return EXIT_BAD_INPUT
        if args.paths:
            print(
                f"error: give the result sets as --base/--new only, not also as paths "
                f"({' '.join(args.paths)})",
                file=sys.stderr,
            )
            return EXIT_BAD_INPUT
        return _diff(args)
    if args.fail or args.min_effect is not None:
        option = "--fail" if args.fail else "--min-effect"
        print(f"error: {option} needs --base PATH and --new PATH", file=sys.stderr)
        return EXIT_BAD_INPUT
    if len(args.paths) == 2 and not args.tables:
        # Two paths used to switch to BASE/NEW mode; now it is explicit.
        print(
            "note: two paths are shown as one set of tables; for the change from one to the "
            f"other use `bench compare --base {args.paths[0]} --new {args.paths[1]}`",
            file=sys.stderr,
        )
    paths = args.paths or ["results"]
    return _print_compare(paths, args.format, args.sources, args.target_accuracy, args.out)


def _report_skipped(loaded: records.Loaded) -> None:
    for problem in loaded.problems:
        print(f"skipped: {problem}", file=sys.stderr)
    for folder in loaded.skipped:
        print(
            f"skipped: {folder} (committed reference records; name it to read it)",
            file=sys.stderr,
        )


def _diff(args: argparse.Namespace) -> int:
    from bench import regress

    try:
        checks = [regress.RegressionCheck.parse(f) for f in args.fail]
    except regress.CheckError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.format == "html":  # refused, not silently ignored
        print(
            "error: --format html draws one set's tables; --base/--new writes text, markdown, "
            "csv or json (one HTML report over both: bench compare BASE NEW --format html)",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    sets = []
    for path in (args.base, args.new):
        loaded = records.load_summaries([path])
        _report_skipped(loaded)
        sets.append(loaded.records)
    min_effect = regress.DEFAULT_MIN_EFFECT if args.min_effect is None else args.min_effect
    df = regress.diff(sets[0], sets[1], min_effect)
    if df.empty:
        why = regress.why_unmatched(sets[0], sets[1])
        print(f"no cell is present in both {args.base} and {args.new}{why}", file=sys.stderr)
        return 1
    if args.format == "json":
        text = df.to_json(orient="records", indent=1) + "\n"
    elif args.format == "csv":
        text = df.to_csv(index=False)
    else:
        text = regress.render(df, markdown=args.format == "markdown") + "\n"
    print(text, end="")
    if args.out:
        target_file = Path(args.out) / f"diff.{_SUFFIX[args.format]}"
        try:
            target_file.parent.mkdir(parents=True, exist_ok=True)
            target_file.write_text(text)
        except OSError as exc:
            print(f"error: cannot write {target_file}: {exc.strerror}", file=sys.stderr)
            return EXIT_BAD_INPUT
        print(f"wrote {target_file}", file=sys.stderr)
    failures = [msg for row in df.to_dict("records") for c in checks if (msg := c.fails(row))]
    for msg in failures:
        print(f"REGRESSION: {msg}", file=sys.stderr)
    return 1 if failures else 0


def cmd_collectives(args: argparse.Namespace) -> int:
    from bench import collectives

    try:
        plan = collectives.Plan.parse(
            engines=args.engines,
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
    from bench import netns

    with_sshd = Engine.HOROVOD in plan.engines
    most = max(plan.workers)
    # absolute: launchers run from the repository root, in the namespaces too
    results = Path(args.results).resolve()
    if args.dry_run:
        cluster = None
        if plan.link_bps:
            cluster = netns.cluster(netns.planned(with_sshd, plan.link_bps), most)
        for argv in collectives.dry_run(plan, results, cluster):
            print(shlex.join(argv))
        print(f"# {len(plan.engines) * len(plan.workers)} cells", file=sys.stderr)
        return 0
    try:
        with _stop_on_signals():
            if plan.link_bps:
                # the pair is removed on the way out, Ctrl-C and SIGTERM included
                with netns.shaped_pair(with_sshd, plan.link_bps) as hosts:
                    statuses = collectives.run(
                        plan.engines,
                        plan.workers,
                        results,
                        timeout=plan.timeout,
                        extra=plan.extra(),
                        cluster=netns.cluster(hosts, most),
                        link_bps=plan.link_bps,
                    )
            else:
                statuses = collectives.run(
                    plan.engines, plan.workers, results, timeout=plan.timeout, extra=plan.extra()
                )
    except (records.RecordsError, LinkError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (KeyboardInterrupt, Interrupted) as exc:
        why = exc.name if isinstance(exc, Interrupted) else "SIGINT (Ctrl-C)"
        print(f"\nbench collectives: stopped by {why}; what was recorded is kept", file=sys.stderr)
        return 128 + (exc.signum if isinstance(exc, Interrupted) else signal.SIGINT)
    loaded = records.load([records.results_file(args.results).parent / collectives.FILE])
    print()
    print(collectives.render_text(collectives.tables(loaded.records)))
    return 0 if all(s == records.Status.OK for s in statuses) else 1


def cmd_predict(args: argparse.Namespace) -> int:
    from bench import netns, predict

    def positive(value: float | None, flag: str, upper: float | None = None) -> None:
        if value is not None and not (value > 0 and (upper is None or value <= upper)):
            bound = f" and <= {upper:g}" if upper is not None else ""
            raise predict.PredictError(f"{flag} must be > 0{bound}, got {value}")

    try:
        workers = [int(w) for w in args.workers.split(",") if w.strip()]
        if not workers or min(workers) < 1:
            raise ValueError
    except ValueError:
        print(f"error: --workers takes integers >= 1, e.g. 8,64,512; got {args.workers!r}",
              file=sys.stderr)  # fmt: skip
        return EXIT_BAD_INPUT
    try:
        link = netns.parse_rate(args.link) if args.link else None
        fit_link = netns.parse_rate(args.fit_link) if args.fit_link else None
        positive(args.compute_ms, "--compute-ms")
        positive(args.grad_mb, "--grad-mb")
        positive(args.busbw_fraction, "--busbw-fraction", 1.0)
        if args.hop_latency_us is not None and args.hop_latency_us < 0:
            raise predict.PredictError(f"--hop-latency-us must be >= 0, got {args.hop_latency_us}")
        engines = [e.strip() for e in (args.engines or "").split(",") if e.strip()]
        model_names = [m.strip() for m in (args.models or "").split(",") if m.strip()]
        if args.check:
            if fit_link is None:
                raise predict.PredictError("--check needs --fit-link RATE, the link to fit on")
            loaded = records.load(args.paths)
            df, notes = predict.check(
                loaded.records, fit_link, engines=engines, models_=model_names
            )
            for note in notes:
                print(f"bench predict: skipped {note}", file=sys.stderr)
            print(f"fitted on {netns.format_rate(fit_link)}; predicted / measured - 1:")
            print(predict.render_check(df))
            return 0 if not df.empty else 1
        given = None
        if args.what_if:
            needed = {
                "--compute-ms": args.compute_ms,
                "--grad-mb": args.grad_mb,
                "--hidden-share": args.hidden_share,
                "--link": link,
                "--busbw-fraction": args.busbw_fraction,
                "--hop-latency-us": args.hop_latency_us,
            }
            missing = [flag for flag, value in needed.items() if value is None]
            if missing:
                raise predict.PredictError(
                    f"--what-if states every input; give {', '.join(missing)} too"
                )
            if not 0 <= args.hidden_share <= 1:
                raise predict.PredictError(
                    f"--hidden-share must be in [0, 1], got {args.hidden_share}"
                )
            positive(args.bucket_mb, "--bucket-mb")
            positive(args.batch, "--batch")
            given = predict.what_if(
                args.what_if,
                compute_s=args.compute_ms * 1e-3,
                grad_bytes=args.grad_mb * 2**20,
                bucket_bytes=args.bucket_mb * 2**20,
                hidden_share=args.hidden_share,
                per_worker_batch=args.batch,
            )
        elif args.hidden_share is not None:
            raise predict.PredictError("--hidden-share is a --what-if input; runs measure it")
        target = predict.Target(
            link_rate_bps=link,
            busbw_fraction=args.busbw_fraction,
            hop_latency_s=None if args.hop_latency_us is None else args.hop_latency_us * 1e-6,
            compute_s=None if args.compute_ms is None else args.compute_ms * 1e-3,
            grad_bytes=None if args.grad_mb is None else args.grad_mb * 2**20,
        )
        return predict.main_predict(
            args.paths,
            workers=workers,
            target=target,
            results=None if args.no_write else Path(args.results),
            engines=engines,
            models_=model_names,
            fit_link_bps=fit_link,
            argv=["bench", *sys.argv[1:]],
            given=given,
        )
    except (predict.PredictError, LinkError, records.RecordsError) as exc:
        print(f"error: {exc}".replace("--emulate-link: rate", "rate"), file=sys.stderr)
        return EXIT_BAD_INPUT


def cmd_export(args: argparse.Namespace) -> int:
    from bench import export

    loaded = records.load(args.paths)
    _report_skipped(loaded)
    try:
        n = export.write(loaded.records, args.pytest_benchmark)
    except OSError as exc:
        print(f"error: cannot write {args.pytest_benchmark}: {exc.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"wrote {n} benchmarks to {args.pytest_benchmark}", file=sys.stderr)
    return 0 if n else 1


def cmd_models(_: argparse.Namespace) -> int:
    width = max(map(len, models.names()))
    for name in models.names():
        m = models.get(name)
        print(
            f"{name:{width}} {m.description} "
            f"(default dataset {m.default_dataset}, batch {m.default_batch})"
        )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    # `bench run --submit` hands the sweep's own flags on to the job
    args.raw_argv = argv[argv.index("run") + 1 :] if args.command == "run" else argv
    handlers = {
        "run": cmd_run,
        "compare": cmd_compare,
        "collectives": cmd_collectives,
        "predict": cmd_predict,
        "export": cmd_export,
        "models": cmd_models,
    }
    return handlers[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
