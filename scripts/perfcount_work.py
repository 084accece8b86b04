#!/usr/bin/env python3
"""The counted benchmarks: the harness's own deterministic paths, each run in a counted
region, for scripts/perfcount.py to count under Valgrind's callgrind.

    python scripts/perfcount_work.py TREE --manifest FILE [--dumps PREFIX] [--records FILE]

TREE holds the packages whose code is counted (a side of the gate): it goes first on
sys.path, so this file, always the working tree's, drives either side's code through
public entry points only (`records.load`, `bench compare` as typed, the runner
protocol's `start` and `epoch_of`), and both sides count the same workload on the same
inputs. Each benchmark is run once uncounted (lazy imports, caches, first-call
effects), then once in a region: `sys.call_tracing`, whose C function
`_PyEval_CallTracing` callgrind is told to collect inside and to dump a profile after
(`--toggle-collect`, `--dump-after`). So one process counts every benchmark apart,
with the interpreter's start, the imports and the set-up in no count. The regions'
labels go to the manifest, in order: callgrind's dump N is region N.

BENCH_PERF_EXTRA_WORK=F (a fraction, e.g. 0.05; BENCH_PERF_EXTRA_WORK_IN=NAME for one
benchmark) makes a benchmark's counted path do F more work, as BENCH_PERF_SLOWDOWN
makes the timed step spin for F of its own time: the path is counted once more in a
calibration region, whose dump this process reads back (--dumps), and the measured
region then runs a busy loop of F x that count besides the path (after `bench compare`
and `records.load`; in the runner's benchmark, a share inside every step the runner
takes). The gate's calibration uses it (docs/development.md#the-performance-gate).

Without --dumps (the test suite), every benchmark runs natively: a smoke test.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import ctypes
import dataclasses
import gc
import importlib.util
import io
import itertools
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import perfcount  # beside this file (its folder is first on sys.path when run as a script)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
GOLDEN = ROOT / "tests" / "data" / "golden.jsonl"
# Enough records that per-record work shows in load and compare; few enough that both
# sides count all three benchmarks in about 20 s under callgrind (instrumenting the
# regions only; a minute instrumenting everything).
RECORDS = 400
# Epochs the runner's benchmark counts, after one uncounted (of the spec's 10)
EPOCHS = 8
EXTRA = "BENCH_PERF_EXTRA_WORK"
PAD_CALIBRATION = 100_000  # busy-loop iterations a calibration of the injected work runs
CHUNK = 64  # fewest busy-loop iterations a unit's injected work runs at once


def _nothing() -> None:
    pass


@dataclasses.dataclass
class Benchmark:
    """One counted path: `run` is what a region counts, after `before` (uncounted set-up);
    `pad` is the injected busy-loop iterations a unit of it (`units` a run) adds."""

    name: str
    run: Callable[[], None]
    before: Callable[[], None] = _nothing
    units: int = 1
    pad: float = 0.0
    owed: float = 0.0  # the fraction of an iteration the units so far fell short by

    def pad_unit(self) -> None:
        """One unit's injected iterations, run in chunks of at least CHUNK once they are
        owed: a unit pays its share without a call of its own each time."""
        self.owed += self.pad
        if self.owed >= CHUNK:
            whole = int(self.owed)
            self.owed -= whole
            busy(whole)


def busy(n: int) -> int:
    """The injected work: n iterations of the same few instructions. Nothing an iteration
    makes depends on n (no counter past the small integers CPython keeps, no new
    objects), so an iteration costs as much in a call of 5 as in a call of 100,000."""
    bit = 0
    for _ in itertools.repeat(None, n):
        bit ^= 1
    return bit


def sample_records(path: Path, n: int = RECORDS) -> Path:
    """`n` records (the golden ones, varied as tests/benchmarks/test_perf.py varies them)
    in one JSON Lines file, written by the code on sys.path. The gate writes it once with
    the working tree's code and gives both sides the same bytes (--records)."""
    from bench import records

    ok = [r for r in records.load([GOLDEN]).records if r["status"] == "ok"]
    with open(path, "w") as fh:
        for i in range(n):
            r = copy.deepcopy(ok[i % len(ok)])
            r.pop("_source", None)
            r["run_id"] = f"r{i}"
            r["spec"]["seed"] = i % 50
            # a fixed spread, without an RNG whose stream a library version could change
            r["throughput"] = float(r["throughput"] or 0) * (0.9 + 0.2 * ((i * 37) % 101) / 100)
            fh.write(json.dumps(r) + "\n")
    return path


def load_records(path: Path) -> Benchmark:
    """`records.load`: every line parsed, migrated and checked."""
    from bench import records

    lines = sum(1 for line in path.read_text().splitlines() if line.strip())

    def run() -> None:
        loaded = records.load([path])
        assert len(loaded.records) == lines and not loaded.problems, loaded.problems[:3]

    return Benchmark("load_records", run)


def bench_compare(folder: Path) -> Benchmark:
    """`bench compare FOLDER` as typed: the summaries (cached beside the file by the
    uncounted first run), the frame, the comparison and the text it prints. Made each
    time (`--no-replay`): a replay would print the first run's output, and the count is
    of the tables being made. A side from before the replay has no such flag."""
    import bench.cli

    argv = ["compare", str(folder), "--wide"]
    if importlib.util.find_spec("bench.cli.replay") is not None:
        argv.append("--no-replay")

    def run() -> None:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = bench.cli.main(argv)
        assert status == 0, err.getvalue()[-2000:]
        assert "ddp" in out.getvalue(), out.getvalue()[-2000:]

    return Benchmark("bench_compare", run)


def runner_steps() -> Benchmark:
    """EPOCHS epochs of the runner's protocol (`epoch_of`: each epoch's batches and
    learning rates prepared, its timed windows, the per-epoch exchange) around a
    stand-in adapter whose step does nothing: the harness's own per-step work, without
    torch. Each region gets a fresh run whose first epoch ran uncounted (its warm-up
    steps, the contention probe's first reading), so every count is of the same steps."""
    from bench.contract.prepare import prepare
    from bench.contract.spec import RunSpec
    from bench.measure.window import Measure
    from runners.protocol import train

    spec = RunSpec(model="lenet", threads=1)
    model, dataset, spe = prepare(spec, 1)
    b = Benchmark("runner_steps", _nothing, units=spe * EPOCHS)
    adapter = stand_in_adapter(spec, b)
    runs: list[Any] = []

    def fresh() -> None:
        run = train.start(adapter, model, dataset, spe, Measure())
        train.epoch_of(run, 0)
        runs.append(run)

    def run() -> None:
        run = runs.pop()
        for epoch in range(1, 1 + EPOCHS):
            train.epoch_of(run, epoch)

    b.run, b.before = run, fresh
    return b


def stand_in_adapter(spec: Any, bench: Benchmark) -> Any:
    """An EngineAdapter at world size 1 whose step returns a constant loss (after the
    benchmark's injected share of busy work, when asked); its collectives the identity."""
    import numpy as np

    from bench.engines import Engine
    from runners.adapters.base import EngineAdapter

    class StandIn(EngineAdapter):
        engine = Engine.DDP  # a name the registry knows; nothing of DDP runs

        def init(self) -> None: ...
        def build(self, *args: Any) -> None: ...
        def to_batch(self, x: Any, y: Any) -> Any:
            return (x, y)

        def train_step(self, batch: Any, lr: float) -> Any:
            if bench.pad:
                bench.pad_unit()
            return 0.5

        def loss_value(self, loss: Any) -> float:
            return float(loss)

        def evaluate(self, x: Any, y: Any) -> tuple[float, int, int]:
            return 0.5 * len(y), len(y) // 2, len(y)

        def state(self) -> Any:
            return {}

        def allreduce_sum(self, arr: Any) -> Any:
            return np.asarray(arr)

        def allgather(self, arr: Any) -> Any:
            return np.asarray(arr)[None, ...]

        def optimizer_state_tensors(self) -> int:
            return 0

        def versions(self) -> dict[str, Any]:
            return {}

        knobs = threads = versions

        def barrier(self) -> None: ...

    # The rest (saving, the collective benchmark's buffers) and whatever a later or an
    # earlier adapter contract adds stay unimplemented: no region calls them, and the
    # stand-in stays instantiable on either side of the gate.
    StandIn.__abstractmethods__ = frozenset()
    adapter = StandIn(spec)  # type: ignore[abstract]  # see above
    adapter.init()
    return adapter


class Regions:
    """Counted regions, numbered as callgrind numbers its dumps (1, 2, ...).

    With `instrument` (callgrind started with --instr-atstart=no), callgrind instruments
    the regions only: the rest (the interpreter's start, the imports, torch's among
    them, each benchmark's uncounted first run) runs at Valgrind's bare speed, several
    times callgrind's; the regions count the same instructions either way."""

    def __init__(self, dumps: str | None, instrument: bool = False) -> None:
        self.dumps = dumps
        self.labels: list[str] = []
        self.request = perfcount.ClientRequest() if instrument else None

    def count(self, label: str, fn: Callable[[], Any]) -> int | None:
        """Run `fn` in a counted region; its instructions when this process can read its
        dump (under callgrind, with --dumps), else None.

        What is on the heap is collected and frozen first: the region's collections then
        scan only what the region made, whatever the side's imports left."""
        gc.collect()
        gc.freeze()
        trim_heap()
        if self.request:
            self.request(perfcount.START_INSTRUMENTATION)
        sys.call_tracing(fn, ())
        if self.request:
            self.request(perfcount.STOP_INSTRUMENTATION)
        self.labels.append(label)
        if self.dumps is None:
            return None
        return perfcount.read(Path(f"{self.dumps}.{len(self.labels)}")).total


def trim_heap() -> None:
    """glibc's malloc_trim: free chunks merged and returned. What ran before a region
    (the runner's probes read /proc, whose contents change from run to run) leaves
    malloc's free lists different each time, and malloc's search through them made the
    runner's count differ by 0.1% between identical runs (measured with address
    randomisation on); after a trim, by 0.07% in one run of four and not at all in the
    others."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def extra_work(names: list[str]) -> dict[str, float]:
    """BENCH_PERF_EXTRA_WORK's fraction for each benchmark it applies to (test-only)."""
    fraction = float(os.environ.get(EXTRA) or 0)
    only = os.environ.get(f"{EXTRA}_IN")
    if only and only not in names:
        raise ValueError(f"{EXTRA}_IN={only!r} is not one of the counted benchmarks {names}")
    return {n: fraction for n in names if fraction > 0 and (not only or n == only)}


def measure(bench: Benchmark, regions: Regions, extra: float) -> None:
    """Warm up, then count `bench`; with `extra`, with its injected work (`inject`)."""
    bench.before()
    bench.run()
    if extra:
        inject(bench, regions, extra)
    bench.before()
    counted = bench.run
    if bench.pad and bench.units == 1:  # else each unit (a step) runs its share itself

        def counted() -> None:
            bench.run()
            bench.pad_unit()

    regions.count(bench.name, counted)


def inject(bench: Benchmark, regions: Regions, extra: float) -> None:
    """Size `bench.pad` so that its units add `extra` x the path's own count in all.

    Three calibration regions: the path itself, then its units' injected calls with no
    iterations and with PAD_CALIBRATION of them in all. A unit's cost is linear in its
    iterations, and the two give the line: a step of runner_steps pays about as much to
    account for its share as 5% of the step is, which sizing on the loop's iterations
    alone left out (5% asked for added 8%)."""
    if regions.dumps is None:
        sys.exit(f"perfcount_work: {EXTRA} needs --dumps (a run under callgrind)")
    bench.before()
    target = extra * (regions.count(f"{bench.name}:calibration", bench.run) or 0) / bench.units

    def units() -> None:
        for _ in range(bench.units):
            bench.pad_unit()

    costs = []
    for pad in (0.0, PAD_CALIBRATION / bench.units):
        bench.pad, bench.owed = pad, 0.0
        costs.append((regions.count(f"pad{pad:g}:calibration", units) or 0) / bench.units)
    per_iteration = (costs[1] - costs[0]) / bench.pad
    if target < costs[0]:
        sys.exit(f"perfcount_work: {extra:.0%} of {bench.name} is less than its units' calls")
    bench.pad, bench.owed = (target - costs[0]) / per_iteration, 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree", type=Path, help="the checkout whose code is counted")
    parser.add_argument("--manifest", type=Path, help="write the regions' labels here (JSON)")
    parser.add_argument("--dumps", help="callgrind's --callgrind-out-file (to read counts back)")
    parser.add_argument("--records", type=Path, help="the records to load and compare (default: "
                        "made here by TREE's code)")  # fmt: skip
    parser.add_argument("--only", action="append", help="count only this benchmark (repeatable)")
    parser.add_argument("--instrument-regions", action="store_true", help="switch callgrind's "
                        "instrumentation on for the regions only (--instr-atstart=no)")  # fmt: skip
    args = parser.parse_args(argv)
    # absolute, links kept: the gate reaches the sides by paths of one length
    tree = Path(os.path.abspath(args.tree))
    if str(tree) not in sys.path[:1]:
        sys.path.insert(0, str(tree))
    import bench

    where = Path(bench.__file__)
    if not where.is_relative_to(tree):
        sys.exit(f"perfcount_work: bench imports from {where}, not from {tree}")
    regions = Regions(args.dumps and os.path.abspath(args.dumps), args.instrument_regions)
    records = args.records and Path(os.path.abspath(args.records))
    # The regions see the inputs' paths relative to their folder: a temporary folder's
    # random name would hash differently every run, and move dict probes with it.
    with tempfile.TemporaryDirectory(prefix="bench-count-") as tmp, contextlib.chdir(tmp):
        path = Path("runs.jsonl")  # the summaries cache is written beside it
        if records:
            path.write_bytes(records.read_bytes())
        else:
            sample_records(path)
        made = [load_records(path), bench_compare(Path(".")), runner_steps()]
        extra = extra_work([b.name for b in made])
        for b in made:
            if not args.only or b.name in args.only:
                measure(b, regions, extra.get(b.name, 0.0))
    if args.manifest:
        args.manifest.write_text(json.dumps({"regions": regions.labels, "bench": str(where)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
