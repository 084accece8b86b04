"""A runner's entry: check the input on every rank, start the engine, train, write the record.

Order of work, and why:
1. Everything that can be wrong with the input (spec, model, dataset, batch vs
   world size, results location) is checked on every rank *before* the framework
   loads and any process group exists, so bad input fails fast everywhere (in a
   fraction of a second, not the seconds a framework's import takes) instead of
   leaving peers hung in a collective.
2. Threads are set before a framework is imported (the adapter module is
   imported only then), identically for every engine. What the imports made is
   then frozen out of the collector's sight (`_adapter`).
3. The run trains (runners/protocol/train.py); rank 0 appends one record. A
   failure after start-up is recorded as failed (or timeout, when a peer went
   silent), a NaN/inf loss as diverged.
4. The engine is shut down in the order its framework documents, so that no
   thread of it is alive when the interpreter exits.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import traceback
from collections.abc import Sequence

from bench import engines, records
from bench.contract.flags import add_spec_flags, spec_from_args
from bench.contract.prepare import check_device, prepare
from bench.core import machine
from bench.core.errors import BenchError, InputError, SpecError
from bench.engines import Engine
from bench.launch import netns
from bench.measure.window import Measure, add_measure_flags, measure_from_args
from bench.records import RunRecord, Status
from runners.adapters.base import EngineAdapter, announced_size
from runners.protocol import affinity, faults, fields
from runners.protocol.common import (
    gather_json,
    launcher,
    load_adapter,
    parse_labels,
    script_name,
)
from runners.protocol.startup import CLOCK
from runners.protocol.timing import PROGRESS
from runners.protocol.trace import trace_to
from runners.protocol.train import Diverged, train

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1
EXIT_DIVERGED = 3  # recorded with status diverged


def build_parser(engine: Engine) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=script_name(engines.get(engine).runner),
        description=f"Train one reference model under {engine.value} and append a result record.",
        allow_abbrev=False,
    )
    add_spec_flags(parser)
    parser.add_argument("--results", default="results", help="results directory or .jsonl file")
    parser.add_argument(
        "--save",
        metavar="STEM",
        help="write final weights to STEM.npz and the framework's own format",
    )
    parser.add_argument(
        "--collective-timeout",
        type=float,
        default=300.0,
        help="seconds a collective may wait for a peer; a run silent that long ends as a "
        "timeout (default: 300)",
    )
    parser.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="free-form label stored in the record (repeatable); used by `bench run`",
    )
    parser.add_argument(
        "--engine-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="engine-specific knob outside the shared spec, recorded in knobs (repeatable); "
        f"{engine.value}: {engines.describe_options(engine)}".replace("%", "%%"),
    )
    parser.add_argument("--quiet", action="store_true", help="no per-epoch progress lines")
    add_measure_flags(parser)
    _trace_flags(parser)
    return parser


def _trace_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("trace (the steps after the profiled ones, --trace-steps)")
    group.add_argument(
        "--trace-dir",
        metavar="DIR",
        help="folder for the trace (default: the cell's log folder under `bench run`, else "
        "traces/<run id>/ beside the results file)",
    )
    group.add_argument(
        "--trace-all-ranks",
        action="store_true",
        help="every rank keeps its own trace (default: rank 0 only)",
    )


class _Inputs:
    """Everything the command line asked for, checked before any framework loads."""

    def __init__(self, engine: Engine, args: argparse.Namespace) -> None:
        self.spec = spec_from_args(args)
        try:
            self.labels = records.typed_labels(parse_labels(args.label))
        except ValueError as exc:
            raise InputError(f"--label: {exc}") from None
        self.options = parse_labels(args.engine_option, "--engine-option")
        self.measure: Measure = measure_from_args(args)
        self.fault = faults.from_env()
        records.check_writable(args.results)
        # Before the framework is imported; frameworks already loaded would have read
        # the old values (the record lists them: it must be empty).
        self.loaded_early = machine.frameworks_loaded(engines.frameworks())
        machine.set_thread_env(self.spec.threads)


def _adapter(engine: Engine, given: _Inputs, collective_timeout: float) -> EngineAdapter:
    """The engine's adapter, its framework imported.

    What the imports made lives as long as the process: frozen out of the collector's
    sight, a collection (the automatic ones between steps, the adapters' at shutdown)
    walks this run's objects only: a DDP worker's shutdown collects in 3 ms, not 0.25 s.
    """
    adapter_class = load_adapter(engine)
    gc.freeze()
    adapter = adapter_class(given.spec, collective_timeout, given.options)
    adapter.profile_comm = given.measure.profile_steps > 0
    return adapter


def main(engine: Engine, argv: Sequence[str] | None = None) -> int:
    """Entry point shared by runners/hvd.py, runners/ddp.py and runners/paddle_dp.py."""
    started = time.time()
    args = build_parser(engine).parse_args(argv)
    CLOCK.mark("started")
    try:
        given = _Inputs(engine, args)
        model, dataset, spe = prepare(given.spec, announced_size(engine))
        engines.check_engine(engine, given.spec)
        check_device(given.spec)
        CLOCK.mark("data")
        adapter = _adapter(engine, given, args.collective_timeout)
        CLOCK.mark("imported")
        adapter.init()
        _check_world(engine, adapter)
        # after the group exists (its threads are moved too), before any timed step
        pinned = None
        if given.measure.pin_cores:
            pinned = affinity.pin(adapter.local_rank, adapter.local_world_size)
        CLOCK.mark("group")
    except WorldMismatch as exc:
        return _refuse_world(engine, adapter, given, args, exc, started)
    except BenchError as exc:
        # A spec or option error follows from the command line and the launcher alone,
        # the same on every worker: said once. Others (a data file, a device) can differ
        # between hosts: every worker says its own.
        if not isinstance(exc, SpecError) or _launcher_rank(engine) in (None, 0):
            print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    record = _new_record(engine, adapter, given)
    if given.measure.pin_cores:  # every rank's cores, or null where there was no share
        record["threads"]["pinned_cores"] = gather_json(adapter, pinned)
    if given.fault is not None:
        faults.install(adapter, given.fault)
    CLOCK.mark("recorded")
    to = trace_to(
        args.results, args.trace_dir, given.labels, record["run_id"], args.trace_all_ranks
    )
    try:
        train(adapter, model, dataset, spe, record, args.quiet, args.save, given.measure, to)
        code = 0
    except Diverged as exc:
        record["status"], record["error"] = Status.DIVERGED, str(exc)
        if adapter.rank == 0:
            print(f"error: diverged: {exc}", file=sys.stderr)
        code = EXIT_DIVERGED
    except Exception as exc:
        _record_failure(record, exc, args.collective_timeout)
        print(f"error on rank {adapter.rank}: {type(exc).__name__}: {exc}", file=sys.stderr)
        code = EXIT_FAILED
    stopped = time.time()
    record["run_start"], record["run_stop"] = records.timestamp(started), records.timestamp(stopped)
    if isinstance(given.labels.get("launched_at"), float):  # set by `bench run`
        record["launch_to_stop_s"] = stopped - given.labels["launched_at"]
    if adapter.rank == 0 and not _write(record, args, engine, code):
        code = EXIT_FAILED
    faults.at_exit(given.fault, adapter.rank)
    if code in (0, EXIT_DIVERGED):  # every rank stopped at the same step: leave cleanly
        adapter.shutdown()
    return code


class WorldMismatch(BenchError):
    """The engine started a world of another size than its launcher announced."""

    def __init__(self, message: str, announced: engines.Announced) -> None:
        super().__init__(message)
        self.announced = announced


def _launcher_rank(engine: Engine) -> int | None:
    """This worker's rank as its launcher announced it (None: no launcher said)."""
    try:
        announced = engines.announced_world(engine, os.environ)
    except BenchError:
        return None
    return announced.rank if announced else None


def _check_world(engine: Engine, adapter: EngineAdapter) -> None:
    """Refuse a world the launcher did not ask for (each worker alone, say, when the
    engine did not join what its launcher started), before any collective runs."""
    announced = engines.announced_world(engine, os.environ)
    if announced is None or announced.size == adapter.world_size:
        return
    raise WorldMismatch(
        f"{engine.value} started a world of {adapter.world_size} worker(s), but the launcher "
        f"announced {announced.size} ({announced.variable}={announced.size}): the workers did "
        f"not join one another, so nothing was trained; start it with its own launcher "
        f"({engines.get(engine).launcher}) as docs/usage.md shows",
        announced,
    )


def _refuse_world(
    engine: Engine,
    adapter: EngineAdapter,
    given: _Inputs,
    args: argparse.Namespace,
    exc: WorldMismatch,
    started: float,
) -> int:
    """One failed record and one error line, from the launcher's rank 0: every worker is
    rank 0 of a world of its own here, so the engine's rank cannot choose the writer."""
    if exc.announced.rank in (None, 0):
        print(f"error: {exc}", file=sys.stderr)
        record = _new_record(engine, adapter, given)
        record["status"], record["error"] = Status.FAILED, f"WorldMismatch: {exc}"
        record["world_size"] = exc.announced.size  # the launch it fails, as compare lists it
        record["run_start"] = records.timestamp(started)
        record["run_stop"] = records.timestamp(time.time())
        _write(record, args, engine, EXIT_FAILED)
    adapter.shutdown()
    return EXIT_FAILED


def _new_record(engine: Engine, adapter: EngineAdapter, given: _Inputs) -> RunRecord:
    labels = given.labels
    record = records.new_record(
        given.spec.to_dict(),
        engine.value,
        adapter.world_size,
        labels,
        launcher(engine),
        link=netns.link_for(labels),
    )
    record["threads"] = {"frameworks_before_thread_env": given.loaded_early}
    record.update(machine.oversubscription(adapter.local_world_size, given.spec.threads))  # type: ignore[typeddict-item]
    if given.fault is not None:
        record["injected"] = str(given.fault)
    return record


def _record_failure(record: RunRecord, exc: Exception, collective_timeout: float) -> None:
    """Failed, or timeout when no collective got past a peer for as long as its time-out."""
    silent = PROGRESS.silent_for()
    error = f"{type(exc).__name__}: {exc}\n" + "".join(traceback.format_exc(limit=8))
    record["status"], record["error"] = Status.FAILED, error
    if silent >= 0.9 * collective_timeout:
        record["status"] = Status.TIMEOUT
        record["error"] = (
            f"no progress for {silent:.0f}s (collective time-out {collective_timeout:.0f}s):"
            f" a peer stopped answering\n" + error
        )


def _write(record: RunRecord, args: argparse.Namespace, engine: Engine, code: int) -> bool:
    """Rank 0 appends the record; False when it could not be written."""
    record.update(fields.peak_fields(record, args.results))
    try:
        path = records.append(args.results, record)
    except records.RecordsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return False
    if not args.quiet and code == 0:
        print(
            f"[{engine.value} np={record['world_size']}] {record['throughput']:,.0f} samples/s, "
            f"test accuracy {record['final_accuracy']:.2%}; record {record['run_id'][:8]} -> {path}",
            flush=True,
        )
    return True
