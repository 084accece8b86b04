"""A run's trace: a few steps after the profiled ones, under the engine's own profiler,
kept as a file that engine's viewer opens (Perfetto, chrome://tracing).

The traced steps follow the profiled steps (runners/protocol/profile.py), so the
profiler is around neither a timed window nor a phase the breakdown reads. Each traced
step carries a range per phase, named as the breakdown names them (`PhaseSpans`, on the
same marks as the profiled steps, so no engine adds code for it), inside one named
"step". Which profiler runs is the adapter's (`EngineAdapter.tracer`); where its files
go is decided here, once for every engine: `--trace-dir`, else the cell's log folder
under `bench run` (its `log_dir` label), else `traces/<run id>/` beside the results
file; rank 0's only, unless `--trace-all-ranks`. The files are kept gzipped: a chrome
trace of a few steps shrinks twelvefold, and Perfetto and chrome://tracing open
`.json.gz` as they are.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import records
from bench.records.types import Trace
from runners.adapters.base import EngineAdapter, PhaseClock, PhaseSpans, Tracer
from runners.protocol.common import gather_str

# a profiler that fails costs the run its trace, never its record
FAILURES = (RuntimeError, ValueError, OSError)


@dataclasses.dataclass(frozen=True)
class TraceTo:
    """Where a run keeps its trace, and whose ranks keep one."""

    results: Path  # the folder of the results file; the record's paths are relative to it
    run_id: str  # this rank's record id: rank 0's names the default folder
    folder: Path | None = None  # None: <results>/traces/<rank 0's run id>/
    all_ranks: bool = False

    def entry(self, trace: Trace) -> Trace:
        """`trace` with its path relative to the results folder where it lies inside it."""
        if "path" not in trace:
            return trace
        path = Path(trace["path"]).resolve()
        try:
            shown = str(path.relative_to(self.results.resolve()))
        except ValueError:
            shown = str(path)
        return {**trace, "path": shown}


def trace_to(
    results: str, trace_dir: str | None, labels: Mapping[str, Any], run_id: str, all_ranks: bool
) -> TraceTo:
    """The rule, for a runner's command line: `--trace-dir`, else `bench run`'s cell log
    folder (the `log_dir` label), else `traces/<run id>/` beside the results file."""
    folder = trace_dir or labels.get("log_dir")
    return TraceTo(
        records.results_file(Path(results)).parent,
        run_id,
        Path(str(folder)) if folder else None,
        all_ranks,
    )


@dataclasses.dataclass(frozen=True)
class Traced:
    """The traces the traced steps kept, as record entries, and the steps they took."""

    traces: list[Trace]
    steps: int = 0  # every step run, the one that showed the phases' order included
    to: TraceTo | None = None

    def named(self, more: Sequence[Trace]) -> list[Trace]:
        """Every trace of the run for its record: these, then `more` (the engine's own,
        such as Horovod's whole-run timeline), paths relative to the results folder."""
        return [*self.traces, *(self.to.entry(t) if self.to else t for t in more)]


def traced(
    adapter: EngineAdapter, steps: Sequence[tuple[Any, float]], to: TraceTo | None
) -> Traced:
    """The first of `steps` shows the phases' order; the others run under the profiler.

    Every rank runs every step (their collectives pair up); the ranks that keep a trace
    write it into the run's folder. Returns rank 0's entries for the record.
    """
    if to is None or len(steps) < 2:
        return Traced([], 0, to)
    order = _phase_order(adapter, *steps[0])
    folder = to.folder or to.results / "traces" / gather_str(adapter, to.run_id)[0]
    active, tool, error = _tracer(adapter, folder, adapter.rank == 0 or to.all_ranks)
    for batch, lr in steps[1:]:
        clock = PhaseSpans(adapter.synchronize, active, order)
        adapter.phase_clock = clock
        try:
            adapter.train_step(batch, lr)
        finally:
            adapter.phase_clock = None
            clock.close()
    adapter.synchronize()
    files: list[Trace] = []
    try:
        with profiler_output(folder if active.tool != Tracer.tool else None):
            files = [gzipped(f) for f in active.stop()]
    except FAILURES as exc:
        error = f"the trace was not written ({type(exc).__name__}: {exc})"
    n, ranks = len(steps) - 1, list(range(adapter.world_size)) if to.all_ranks else [0]
    kept = [to.entry({"steps": n, "ranks": ranks, **f}) for f in files]
    if error is not None:
        kept.append({"tool": tool, "error": error, "steps": n, "ranks": ranks})
    return Traced(kept, len(steps), to)


def gzipped(trace: Trace) -> Trace:
    """`trace` with its file replaced by `<file>.gz`; as it was where that cannot be
    written (a full disk keeps the plain file rather than lose it)."""
    if "path" not in trace:
        return trace
    path = Path(trace["path"])
    packed = path.with_name(path.name + ".gz")
    try:
        with path.open("rb") as src, gzip.open(packed, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst)
    except OSError:
        with contextlib.suppress(OSError):
            packed.unlink(missing_ok=True)
        return trace
    path.unlink()
    return {**trace, "path": str(packed)}


def _phase_order(adapter: EngineAdapter, batch: Any, lr: float) -> list[str]:
    """The phases one step marks, in order (a phase range is named when it opens)."""
    clock = PhaseClock(adapter.synchronize)
    adapter.phase_clock = clock
    try:
        adapter.train_step(batch, lr)
    finally:
        adapter.phase_clock = None
    return list(clock.phases)


def _tracer(adapter: EngineAdapter, folder: Path, keep: bool) -> tuple[Tracer, str, str | None]:
    """The engine's tracer, started (one that traces nothing where it did not start), its
    tool, and why this rank keeps no trace (None: it does). A rank that cannot write
    still starts one: its profiler may be a collective (Horovod's timeline)."""
    error = None
    if keep:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            keep, error = False, f"cannot create {folder}: {exc.strerror}"
    tool = Tracer.tool
    try:
        tracer = adapter.tracer(folder, keep)
        tool = tracer.tool
        with profiler_output(folder if keep else None):
            tracer.start()
    except FAILURES as exc:
        return Tracer(), tool, f"the profiler did not start ({type(exc).__name__}: {exc})"
    return tracer, tool, error


@contextlib.contextmanager
def profiler_output(folder: Path | None) -> Iterator[None]:
    """What a profiler writes to stderr while it starts or stops goes to the trace's
    folder (`profiler.log`), not to the user's terminal.

    Kineto (torch.profiler) prints `profiler_start` / `profiler_stop` lines from native
    code, at file-descriptor level and per rank, whatever Python's logging says; its
    log level that hides them hides its errors too. So descriptor 2 is pointed at a
    file for just these calls; an exception still propagates and is recorded.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            text = caught.read()
            if text and folder is not None:
                with contextlib.suppress(OSError), (folder / "profiler.log").open("ab") as log:
                    log.write(text)
            elif text:  # no folder to keep it in: all but Kineto's chatter goes on
                kept = [ln for ln in text.splitlines(True) if not ln.startswith(KINETO_CHATTER)]
                os.write(2, b"".join(kept))


# the prefixes of Kineto's progress lines (its levels USDT and STAGE)
KINETO_CHATTER = (b"USDT:", b"STAGE:")
