"""The one training protocol every engine runs, written once.

Order of work, and why:
1. Everything that can be wrong with the input (spec, model, dataset, batch vs
   world size, results location) is checked on every rank *before* any process
   group exists, so bad input fails fast everywhere instead of leaving peers
   hung in a collective.
2. Threads are set before a framework is imported (the adapter module is
   imported only then), identically for every engine.
3. Each rank times its own training steps in windows (`timed_window`): one
   device synchronisation per window, per-step times from device events on a
   GPU, after `warmup_steps`; each epoch's batches are prepared before its loop,
   losses are read back after it, and evaluation is outside the timed region.
   Losses, timings and fingerprints are exchanged once per epoch and once at the
   end, never inside a window. After training, measurement-only windows are
   added until the median window throughput is steady (`Measure`); the trained
   result (weights, accuracy, losses) is taken before them.
4. Rank 0 appends one record; a failure after start-up is recorded as failed, and
   a loss that becomes NaN/inf (seen by every rank in the per-epoch exchange) stops
   all ranks after that epoch and is recorded as diverged, with the step.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib
import json
import math
import os
import resource
import socket
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np

import models
from bench import contention, engines, records, stats
from bench import data as bdata
from bench import env as benv
from bench.checks import InputError, check_device, prepare, total_steps
from bench.engines import Engine
from bench.record import Epoch, Loss, RunFields, RunRecord
from bench.spec import SpecError, add_spec_flags, spec_from_args
from models.base import Weights
from runners.engines.base import EngineAdapter

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1
EXIT_DIVERGED = 3  # recorded with status diverged


def build_parser(engine: Engine) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_script_name(engines.get(engine).runner),
        description=f"Train one reference model under {engine.value} and append a result record.",
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
        help="seconds a collective may wait for a peer; a run silent that long ends as a timeout (default: 300)",
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
    return parser


def add_measure_flags(parser: argparse.ArgumentParser) -> None:
    """--window-steps, --target-ci and --measure-cap-s (runners and `bench run` alike)."""
    d = Measure()
    group = parser.add_argument_group("measurement (changes no trained number)")
    group.add_argument(
        "--window-steps",
        type=int,
        default=None,
        help=f"steps per timed window, one device synchronisation each (default: {d.window_steps})",
    )
    group.add_argument(
        "--target-ci",
        type=float,
        default=None,
        help="after training, measure more windows until the 95%% interval of the median "
        f"window throughput is within +- this fraction; 0: off (default: {d.target_ci})",
    )
    group.add_argument(
        "--measure-cap-s",
        type=float,
        default=None,
        help=f"stop measuring more windows once timed steps took this long (default: {d.cap_s})",
    )


def measure_from_args(args: argparse.Namespace) -> Measure:
    """The Measure given by parsed flags (unset ones keep their defaults); checked."""
    given = {
        "window_steps": getattr(args, "window_steps", None),
        "target_ci": getattr(args, "target_ci", None),
        "cap_s": getattr(args, "measure_cap_s", None),
    }
    return Measure(**{k: v for k, v in given.items() if v is not None}).check()


def _labels(items: Sequence[str], flag: str = "--label") -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError(f"{flag} expects KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def _script_name(path: Path) -> str:
    """The runner as its usage line names it: relative to the repository when inside it."""
    try:
        return str(path.relative_to(engines.ROOT))
    except ValueError:
        return path.name


def _load_adapter(engine: Engine) -> type[EngineAdapter]:
    module, _, name = engines.get(engine).adapter.partition(":")
    try:
        cls: type[EngineAdapter] = getattr(importlib.import_module(module), name)
    except ImportError as exc:
        # e.g. Horovod installed without its PyTorch extension ("has not been built")
        raise engines.cannot_start(engine, exc) from None
    return cls


def _gather_str(adapter: EngineAdapter, text: str, width: int = 128) -> list[str]:
    raw = text.encode()[:width].ljust(width, b"\0")
    rows = adapter.allgather(np.frombuffer(raw, dtype=np.uint8).copy())
    return [bytes(r.astype(np.uint8)).rstrip(b"\0").decode(errors="replace") for r in rows]


def _gather_json(adapter: EngineAdapter, value: Any, width: int = 1024) -> list[Any]:
    """Every rank's small JSON-able value, in rank order."""
    return [json.loads(t) if t else None for t in _gather_str(adapter, json.dumps(value), width)]


def peak_rss_mb() -> float:
    """Peak resident memory of this process (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _launcher(engine: Engine) -> dict[str, Any]:
    """Which launcher started this process, and its command line when visible."""
    name = engines.recognise_launcher(engine, os.environ)
    parent: list[str] | None = None
    try:
        import psutil

        proc = psutil.Process().parent()
        parent = proc.cmdline() if proc else None
    except Exception:  # psutil missing or the parent already gone: the record says unknown
        parent = None
    return {"name": name, "runner_argv": [sys.executable, *sys.argv], "parent_argv": parent}


class Diverged(Exception):
    """A loss became NaN or infinite: the run stops and is recorded as diverged."""


@dataclasses.dataclass(frozen=True)
class Measure:
    """How a run measures throughput (not part of the spec: it changes no trained number).

    Steps are timed in windows of `window_steps`. After training, more windows are
    measured (training on, after the final weights and accuracy are taken) until the
    95% interval of the median window throughput is within +-`target_ci` of it, or
    the timed seconds reach `cap_s`; 0 turns the extension off.
    """

    window_steps: int = 10
    target_ci: float = 0.02
    cap_s: float = 3.0  # the default sweep (54 runs) stays under 10 minutes on 2 cores

    def check(self) -> Measure:
        if self.window_steps < 1:
            raise InputError(f"--window-steps must be >= 1, got {self.window_steps}")
        if not 0 <= self.target_ci < 1:
            raise InputError(f"--target-ci must be in [0, 1) (0.02 is +-2%), got {self.target_ci}")
        if self.cap_s < 0:
            raise InputError(f"--measure-cap-s must be >= 0, got {self.cap_s}")
        return self


def timed_window(adapter: EngineAdapter, steps: Sequence[tuple[Any, float]]) -> Window:
    """The timed region: train `steps` back to back and time them as one window.

    Invariants, which make the numbers those of the engine and not of the harness:
    - every batch and learning rate was prepared before the window starts;
    - nothing inside reads a value back from the device: losses stay device tensors,
      read after the window;
    - exactly one device synchronisation, after the last step: queued work is waited
      for once, so a GPU never idles between steps for the host's sake;
    - per-step times come from the adapter's timer (CUDA events on a torch GPU, the
      host clock otherwise), whose marks do not wait for the device;
    - the window's time is the host clock from before the first step to after the
      synchronisation, so it covers all device work the steps queued.
    """
    timer = adapter.step_timer(len(steps))
    losses: list[Any] = []
    t0 = time.perf_counter()
    for batch, lr in steps:
        timer.mark()
        losses.append(adapter.train_step(batch, lr))
    timer.mark()
    adapter.synchronize()
    seconds = time.perf_counter() - t0
    return Window(seconds, timer.step_times(), losses)


@dataclasses.dataclass
class Window:
    seconds: float
    step_times: list[float]
    losses: list[Any]


def _windows(first_step: int, n_steps: int, warmup: int, size: int) -> list[tuple[int, int, bool]]:
    """(start, stop, timed) index ranges of one epoch's steps: warm-up steps form their
    own untimed window, the rest windows of `size` (the epoch's last may be shorter)."""
    out = []
    s = 0
    if first_step < warmup:
        s = min(warmup - first_step, n_steps)
        out.append((0, s, False))
    while s < n_steps:
        out.append((s, min(s + size, n_steps), True))
        s = out[-1][1]
    return out


def _window_estimate(tput: Sequence[float]) -> tuple[stats.Estimate, float | None]:
    est = stats.median_interval(tput)
    return est, stats.relative_half_width(est)


class _Progress:
    """When this rank last got past a collective. An exception after a silence as long as
    the collective time-out is a peer that stopped answering, whatever the engine calls it
    (Gloo says "Timed out", Horovod only "has been shut down"): the run is a `timeout`."""

    def __init__(self) -> None:
        self.at = time.monotonic()

    def mark(self) -> None:
        self.at = time.monotonic()

    def silent_for(self) -> float:
        return time.monotonic() - self.at


PROGRESS = _Progress()


@dataclasses.dataclass
class EpochTiming:
    """What one epoch's timed loop leaves behind (see `timed_loop`)."""

    losses: list[Any]  # one loss per step, as the engine's device values (read after)
    train_time: float  # seconds of every window, warm-up windows included
    step_times: list[float]  # per-step seconds of the timed windows
    window_s: list[float]  # seconds of each timed window
    window_n: list[int]  # steps in each timed window
    loop_wall: float  # wall clock from the first timed window to the last window's end


def timed_loop(
    adapter: EngineAdapter,
    plan: Sequence[tuple[Any, float]],
    first_step: int,
    warmup_steps: int,
    window_steps: int,
    on_first_timed: Callable[[], None],
) -> EpochTiming:
    """The timed region: one epoch's `plan` of (batch, learning rate) steps, in windows.

    Invariants, which make the engines' numbers comparable:
    - everything a step needs is prepared before the call (batches built and staged,
      learning rates computed): no input work runs inside a window;
    - a window is `timed_window`: its steps, then exactly one device synchronisation;
      no collective of the harness, gather, print or loss read-back runs in a window
      (losses are returned as device values and read after the loop);
    - steps before `warmup_steps` (counted from the run's first step, `first_step`
      being this epoch's) run in untimed windows, and no window mixes warm-up and
      timed steps (`_windows`);
    - `loop_wall` runs from the first timed window to the end, so whatever the harness
      does between windows counts against the loop throughput; `on_first_timed` is
      called once, just before the first timed window.
    """
    out = EpochTiming([], 0.0, [], [], [], 0.0)
    mark = None
    for start, stop, is_timed in _windows(first_step, len(plan), warmup_steps, window_steps):
        if is_timed and mark is None:
            on_first_timed()  # the contention probe: measuring apparatus, not the loop's work
            mark = time.perf_counter()
        win = timed_window(adapter, plan[start:stop])
        PROGRESS.mark()
        out.losses.extend(win.losses)
        out.train_time += win.seconds
        if is_timed:
            out.step_times.extend(win.step_times)
            out.window_s.append(win.seconds)
            out.window_n.append(stop - start)
    if mark is not None:
        out.loop_wall = time.perf_counter() - mark
    return out


@dataclasses.dataclass
class Steady:
    """The windows of a run once throughput is measured (see `measure_until_steady`)."""

    all_windows: np.ndarray  # [rank, window] seconds
    tput: list[float]  # global samples/s of each window, timed by its slowest rank
    est: stats.Estimate  # the window median with its interval
    half: float | None  # the interval's half width relative to the median
    extra: int  # measurement-only steps after the trained result
    stopped_by: str  # target_ci | time_cap | disabled


def measure_until_steady(
    adapter: EngineAdapter,
    measure: Measure,
    global_batch: int,
    timed: list[float],
    window_s: list[float],
    window_n: list[int],
    next_chunk: Callable[[], list[tuple[Any, float]]],
) -> Steady:
    """Training's timed windows, then measurement-only windows until the window median's
    95% interval is within `measure.target_ci` or the timed seconds reach `measure.cap_s`.

    Every rank takes the same decision from gathered times. Each extra window's steps
    come from `next_chunk`, prepared before the window as in training; `timed`,
    `window_s` and `window_n` are extended in place.
    """
    all_windows = adapter.allgather(np.asarray(window_s, dtype=np.float64))  # [world, n]
    tput = (global_batch * np.asarray(window_n) / all_windows.max(axis=0)).tolist()
    est, half = _window_estimate(tput)
    extra = 0
    stopped_by = "disabled" if measure.target_ci == 0 else "target_ci"
    while measure.target_ci > 0 and (half is None or half > measure.target_ci):
        spent = float(all_windows.sum(axis=1).max()) if all_windows.size else 0.0
        if spent >= measure.cap_s:
            stopped_by = "time_cap"
            break
        # prepared outside the timed window, like every epoch's batches
        chunk = next_chunk()
        win = timed_window(adapter, chunk)
        timed.extend(win.step_times)
        window_s.append(win.seconds)
        window_n.append(len(chunk))
        extra += len(chunk)
        new = adapter.allgather(np.asarray([win.seconds], dtype=np.float64))
        all_windows = np.concatenate([all_windows, new], axis=1)
        tput.append(global_batch * len(chunk) / float(new.max()))
        est, half = _window_estimate(tput)
    return Steady(all_windows, tput, est, half, extra, stopped_by)


def _progress_fields(
    adapter: EngineAdapter,
    spe: int,
    step: int,
    epochs: list[Epoch],
    step_losses: list[Loss],
    training_wall_s: float,
) -> RunFields:
    """The record fields of training so far: written by a finished and a diverged run alike."""
    spec, world = adapter.spec, adapter.world_size
    per = spec.per_worker_batch(world)
    return {
        "engine_versions": adapter.versions(),
        "knobs": adapter.knobs(),
        "per_worker_batch": per,
        "global_batch": per * world,
        "steps_per_epoch": spe,
        "steps": step,
        "lr_peak": spec.scaled_lr(world),
        "epochs": epochs,
        "step_losses": step_losses,
        # the training phase: first batch prepared to last result gathered
        "training_wall_s": training_wall_s,
    }


@dataclasses.dataclass
class _Run:
    """One rank's training run in progress: its set-up, and what its epochs accumulate."""

    adapter: EngineAdapter
    model: models.ModelDef
    dataset: bdata.Dataset
    spe: int
    total: int  # steps in all
    measure: Measure
    init_fps: list[str]  # every rank's initial-weight fingerprint
    init_opt_state: int
    test_idx: np.ndarray  # this rank's evaluation shard
    root: int  # the process tree whose CPU use is this run's (bench/contention.py)
    wall0: float = dataclasses.field(default_factory=time.perf_counter)
    cpu0: float = dataclasses.field(default_factory=time.process_time)  # all threads
    order_hash: Any = dataclasses.field(default_factory=hashlib.sha256)
    timed: list[float] = dataclasses.field(default_factory=list)  # per-step s, timed windows
    window_s: list[float] = dataclasses.field(default_factory=list)  # seconds of each window
    window_n: list[int] = dataclasses.field(default_factory=list)  # steps in each window
    epochs: list[Epoch] = dataclasses.field(default_factory=list)
    step_losses: list[Loss] = dataclasses.field(default_factory=list)
    step: int = 0
    loop_wall: float = 0.0
    input_time: float = 0.0
    input_steps: int = 0
    peak_mb: float | None = None  # training's peak device memory, staged batches excluded
    staged_mb: float | None = None
    busy0: contention.Snapshot | None = None

    def first_timed(self) -> None:
        """What else uses the CPUs, from the first timed step on."""
        if self.busy0 is None:
            self.busy0 = contention.snapshot(self.root)

    def batches(self, epoch: int, order: np.ndarray, steps: range, hash_order: bool) -> list[Any]:
        """This rank's batches for `steps` of an epoch, as the engine's tensors."""
        adapter, dataset, spec = self.adapter, self.dataset, self.adapter.spec
        per = spec.per_worker_batch(adapter.world_size)
        out = []
        for s in steps:
            idx = bdata.shard(order, s, adapter.rank, per, adapter.world_size)
            if hash_order:
                self.order_hash.update(idx.astype(np.int64).tobytes())
            x = (
                bdata.augment(dataset, idx, spec.seed, epoch)
                if spec.augment
                else dataset.train_x[idx]
            )
            out.append(adapter.to_batch(x, dataset.train_y[idx]))
        return out


def _start(
    adapter: EngineAdapter,
    model: models.ModelDef,
    dataset: bdata.Dataset,
    spe: int,
    measure: Measure,
) -> _Run:
    """Build the model from the shared initial weights and fingerprint what training
    starts from, once every engine's set-up (broadcasts included) is over."""
    spec = adapter.spec
    weights = models.init_weights(model, dataset.input_shape, dataset.num_classes, spec.seed)
    PROGRESS.mark()
    adapter.build(model, weights, dataset.input_shape, dataset.num_classes)
    PROGRESS.mark()
    init_fps = _gather_str(adapter, models.weights_fingerprint(adapter.state()))
    init_opt_state = adapter.optimizer_state_tensors()
    test_idx = bdata.eval_shard(len(dataset.test_y), adapter.rank, adapter.world_size)
    root = contention.run_tree_root()
    # wall0 and cpu0 start here, as the run's clock
    return _Run(
        adapter,
        model,
        dataset,
        spe,
        total_steps(spec, spe),
        measure,
        init_fps,
        init_opt_state,
        test_idx,
        root,
    )


def _epoch(run: _Run, epoch: int) -> tuple[Epoch, list[float]]:
    """One epoch: its batches prepared, its timed loop, then once every rank's step losses
    and time and the global test metrics. Returns its entry and the mean step losses."""
    adapter, dataset, spec = run.adapter, run.dataset, run.adapter.spec
    world = adapter.world_size
    per = spec.per_worker_batch(world)
    order = bdata.epoch_order(spec.seed, epoch, len(dataset.train_y))
    # The epoch's batches and learning rates are prepared before its loop, so the
    # loop does what a hand-written one does: step, and synchronise once a window.
    n_steps = min(run.spe, run.total - run.step)
    before_mb = adapter.device_memory_mb()
    t_in = time.perf_counter()  # the input pipeline: indices, augmentation, tensors
    plan = list(
        zip(
            run.batches(epoch, order, range(n_steps), hash_order=True),
            [spec.lr_at(run.step + s, run.spe, world, run.total) for s in range(n_steps)],
            strict=True,
        )
    )
    run.input_time += time.perf_counter() - t_in
    run.input_steps += n_steps
    # The staged copies land before the first timed step, and the peak-memory window
    # covers training only: not the staged epoch (subtracted), not evaluation.
    adapter.synchronize()
    after_mb = adapter.device_memory_mb()
    adapter.reset_peak_device_memory()
    loop = timed_loop(
        adapter, plan, run.step, spec.warmup_steps, run.measure.window_steps, run.first_timed
    )
    run.timed.extend(loop.step_times)
    run.window_s.extend(loop.window_s)
    run.window_n.extend(loop.window_n)
    run.loop_wall += loop.loop_wall
    run.step += n_steps
    epoch_peak = adapter.peak_device_memory_mb()
    if epoch_peak is not None and before_mb is not None and after_mb is not None:
        run.staged_mb = max(run.staged_mb or 0.0, after_mb - before_mb)
        run.peak_mb = max(run.peak_mb or 0.0, epoch_peak - (after_mb - before_mb))
    del plan
    losses = [adapter.loss_value(loss) for loss in loop.losses]
    # Once per epoch: every rank's step losses and time, and global test metrics.
    all_losses = adapter.allgather(np.asarray(losses, dtype=np.float64))
    epoch_step_losses = all_losses.mean(axis=0).tolist()
    run.step_losses.extend(epoch_step_losses)
    slowest = float(adapter.allgather(np.asarray([loop.train_time]))[:, 0].max())
    loss_sum, correct, count = adapter.evaluate(
        dataset.test_x[run.test_idx], dataset.test_y[run.test_idx]
    )
    ev = adapter.allreduce_sum(np.asarray([loss_sum, correct, count], dtype=np.float64))
    PROGRESS.mark()
    entry: Epoch = {
        "epoch": epoch,
        "steps": len(losses),
        "samples_seen": run.step * per * world,
        "train_loss": float(np.mean(epoch_step_losses)),
        "test_loss": float(ev[0] / ev[2]),
        "test_accuracy": float(ev[1] / ev[2]),
        "train_time_s": slowest,
        "elapsed_s": time.perf_counter() - run.wall0,  # since training began
        "samples_per_s": len(losses) * per * world / slowest if slowest > 0 else None,
    }
    run.epochs.append(entry)
    return entry, epoch_step_losses


def _check_finite(
    run: _Run, entry: Epoch, epoch_step_losses: list[float], record: RunRecord
) -> None:
    """Raise Diverged, with the record's progress so far, when a loss of the epoch is NaN
    or infinite. Every rank holds the same gathered losses, so all stop here together."""
    test_loss = entry["test_loss"]
    if all(isinstance(v, float) and math.isfinite(v) for v in [*epoch_step_losses, test_loss]):
        return
    adapter, spec, steps = run.adapter, run.adapter.spec, entry["steps"]
    first = next((i for i, v in enumerate(epoch_step_losses) if not math.isfinite(v)), None)
    at = run.step - steps + (steps - 1 if first is None else first)
    what = "test loss" if first is None else "training loss"
    value = test_loss if first is None else epoch_step_losses[first]
    wall = time.perf_counter() - run.wall0
    record.update(_progress_fields(adapter, run.spe, run.step, run.epochs, run.step_losses, wall))
    record["diverged_at_step"] = at
    raise Diverged(
        f"{what} became {value} at step {at} (0-based) of {run.total}; lower --lr "
        f"(peak {spec.scaled_lr(adapter.world_size):g} at this world size) or add "
        "--lr-warmup-epochs"
    )


@dataclasses.dataclass
class _Result:
    """What a finished run gathered from every rank after training, for its record."""

    final_state: Weights  # the trained weights, before any measurement-only step
    final_fps: list[str]
    train_wall: float
    steady: Steady
    usage: np.ndarray  # [rank, (peak RSS, CPU use, GPU MB, loop wall, input ms, staged MB)]
    step_times: np.ndarray  # [rank, timed step]
    order_fps: list[str]
    hosts: list[str]
    loads: list[Any]


def _finish(run: _Run) -> _Result:
    """The trained result, then measurement-only windows until throughput is steady
    (`measure_until_steady`), then what every rank measured, gathered."""
    adapter, dataset, spec, measure = run.adapter, run.dataset, run.adapter.spec, run.measure
    world = adapter.world_size
    per = spec.per_worker_batch(world)
    # The trained result, before any measurement-only steps change the weights.
    final_state = adapter.state()
    final_fps = _gather_str(adapter, models.weights_fingerprint(final_state))
    train_wall = time.perf_counter() - run.wall0

    # measurement windows draw the data of the epochs after training, a window at a time
    spe = run.spe
    extra_epoch, extra_pos = spec.epochs, spe
    extra_order = np.zeros(0, dtype=np.int64)
    last_lr = spec.lr_at(run.total - 1, spe, world, run.total)

    def next_chunk() -> list[tuple[Any, float]]:
        nonlocal extra_epoch, extra_pos, extra_order
        if extra_pos >= spe:
            extra_order = bdata.epoch_order(spec.seed, extra_epoch, len(dataset.train_y))
            extra_epoch, extra_pos = extra_epoch + 1, 0
        span = range(extra_pos, min(extra_pos + measure.window_steps, spe))
        extra_pos = span.stop
        return [(b, last_lr) for b in run.batches(extra_epoch - 1, extra_order, span, False)]

    steady = measure_until_steady(
        adapter, measure, per * world, run.timed, run.window_s, run.window_n, next_chunk
    )
    busy1 = contention.snapshot(run.root)

    busy = (time.process_time() - run.cpu0) / max(time.perf_counter() - run.wall0, 1e-9)
    usage = adapter.allgather(
        np.asarray(
            [
                peak_rss_mb(),
                busy,
                np.nan if run.peak_mb is None else run.peak_mb,
                run.loop_wall,
                1e3 * run.input_time / max(run.input_steps, 1),
                np.nan if run.staged_mb is None else run.staged_mb,
            ],
            dtype=np.float64,
        )
    )
    step_times = adapter.allgather(np.asarray(run.timed, dtype=np.float64))  # [world, n_timed]
    order_fps = _gather_str(adapter, run.order_hash.hexdigest()[:16])
    hosts = _gather_str(adapter, socket.gethostname())
    loads = _gather_json(adapter, contention.summarise(run.busy0, busy1))
    adapter.barrier()
    return _Result(
        final_state, final_fps, train_wall, steady, usage, step_times, order_fps, hosts, loads
    )


def _finished_fields(run: _Run, result: _Result, record: RunRecord) -> RunFields:
    """Every field a finished run adds to its record, assembled in one place."""
    adapter, dataset, spec, measure = run.adapter, run.dataset, run.adapter.spec, run.measure
    per, world = spec.per_worker_batch(adapter.world_size), adapter.world_size
    usage, step_times, steady = result.usage, result.step_times, result.steady
    est = steady.est
    n_timed = step_times.shape[1]
    # every rank's window seconds summed: what its timed steps took, synchronised
    per_rank_total = steady.all_windows.sum(axis=1)
    n_train_timed = n_timed - steady.extra
    init_fps, final_fps, order_fps = run.init_fps, result.final_fps, result.order_fps
    flops = run.model.flops
    # engine extras once training is over (e.g. Horovod's timeline): fields RunRecord names
    extras = cast(RunFields, adapter.finish(run.step))
    return {
        **extras,
        # options that change training (not where files go) distinguish runs in compare
        "engine_options": {k: v for k, v in adapter.options.items() if k != "timeline"},
        **_progress_fields(
            adapter, run.spe, run.step, run.epochs, run.step_losses, result.train_wall
        ),
        # as each framework and OpenMP runtime reports them, read back after training
        "threads": {
            **record.get("threads", {}),
            **adapter.threads(),
            "openmp": benv.openmp_threads(),
            "frameworks_loaded": benv.frameworks_loaded(engines.frameworks()),
        },
        "hosts": result.hosts,
        # Launcher's node count (namespaces share a hostname, so hosts cannot tell).
        "nodes": world // max(adapter.local_world_size, 1),
        "timed_steps": n_timed,
        "dataset": {
            "name": dataset.name,
            "train_samples": len(dataset.train_y),
            "test_samples": len(dataset.test_y),
            "input_shape": list(dataset.input_shape),
            "fingerprint": dataset.fingerprint(),
        },
        "fingerprints": {
            "init_weights": init_fps[0],
            "init_weights_ranks_agree": len(set(init_fps)) == 1,
            # optimizer state tensors after set-up: 0 unless set-up took a step
            "init_optimizer_state_tensors": run.init_opt_state,
            "final_weights": final_fps[0],
            "final_weights_ranks_agree": len(set(final_fps)) == 1,
            # hash of every rank's consumed indices, in rank order
            "data_order": hashlib.sha256("".join(order_fps).encode()).hexdigest()[:16],
            "data_order_per_rank": order_fps,
        },
        "resources": {
            "peak_rss_mb": usage[:, 0].tolist(),
            "cpu_utilisation": usage[:, 1].tolist(),  # CPU-seconds per second, per rank
            # peak over the training loops (model, optimizer state, activations),
            # without the epoch's staged batches and evaluation
            "peak_gpu_mb": None if run.peak_mb is None else usage[:, 2].tolist(),
            "staged_batches_gpu_mb": None if run.staged_mb is None else usage[:, 5].tolist(),
        },
        # Batches are built before each epoch's timed loop; this is what building them
        # costs per step. Above 1x the step time, a pipeline overlapping the two would
        # be bound by its input, not by the engine.
        "input_pipeline": {
            "ms_per_step": usage[:, 4].tolist(),
            "augmented": bool(spec.augment and dataset.augments),
            "vs_step_time": (
                float(usage[:, 4].max() / (1e3 * np.median(step_times)))
                if step_times.size
                else None
            ),
        },
        "step_times_s": step_times.tolist(),
        "window_times_s": steady.all_windows.tolist(),  # [rank][window], one sync per window
        "window_steps": run.window_n,
        # global samples/s of each window, timed by its slowest rank
        "window_throughput": steady.tput,
        "measurement": {
            "window_steps": measure.window_steps,
            "windows": len(run.window_n),
            "step_clock": adapter.step_timer(0).clock,
            "target_ci": measure.target_ci,
            "cap_s": measure.cap_s,
            # target_ci: the interval got narrow enough; time_cap: it did not in time;
            # disabled: training's own windows only
            "stopped_by": steady.stopped_by,
            "window_median": est.value,
            "window_ci": [est.low, est.high],
            "ci_half_width": steady.half,
            "training_timed_steps": n_train_timed,
            "extra_steps": steady.extra,  # measurement-only steps after the trained result
        },
        # what else used the CPUs while this run was timed, per rank (bench/contention.py)
        "contention": result.loads,
        "contended": any(bool(c and c.get("contended")) for c in result.loads),
        "throughput": per * world * n_timed / float(per_rank_total.max()),
        "per_rank_throughput": (per * n_timed / per_rank_total).tolist(),
        # the same samples over the timed loop's wall time, so whatever the harness does
        # between windows counts against it (independent_overhead.py --mode launches
        # compares it with each engine's documented loop)
        "loop_throughput": (
            per * world * n_train_timed / float(usage[:, 3].max())
            if n_train_timed and float(usage[:, 3].max()) > 0
            else None
        ),
        "flops_per_sample": (
            None
            if flops is None
            else {
                "forward": (f := flops(dataset.input_shape, dataset.num_classes)),
                "train": 3 * f,
            }
        ),
        "final_accuracy": run.epochs[-1]["test_accuracy"],
        "final_loss": run.epochs[-1]["test_loss"],
    }


def train(
    adapter: EngineAdapter,
    model: models.ModelDef,
    dataset: bdata.Dataset,
    spe: int,
    record: RunRecord,
    quiet: bool,
    save: str | None,
    measure: Measure | None = None,
) -> None:
    """The training protocol proper; fills `record` in place (rank 0's copy is written).

    Set-up (`_start`), the epochs (`_epoch`, each a `timed_loop` of `timed_window`s, a
    diverged loss stopping every rank after its epoch), measurement until steady and
    the gathered results (`_finish`), then the record's fields (`_finished_fields`).
    """
    run = _start(adapter, model, dataset, spe, measure or Measure())
    spec, world = adapter.spec, adapter.world_size
    tag = f"[{adapter.engine.value} np={world}]"
    for epoch in range(spec.epochs):
        entry, epoch_step_losses = _epoch(run, epoch)
        if adapter.rank == 0 and not quiet:
            print(
                f"{tag} epoch {epoch + 1}/{spec.epochs}  samples {entry['samples_seen']:,}  "
                f"loss {entry['train_loss']:.4f}  test_acc {entry['test_accuracy']:.2%}  "
                f"{entry['samples_per_s']:,.0f} samples/s",
                flush=True,
            )
        _check_finite(run, entry, epoch_step_losses, record)
        if run.step >= run.total:
            break
    result = _finish(run)
    record.update(_finished_fields(run, result, record))
    if save and adapter.rank == 0:
        np.savez(save + ".npz", **result.final_state)  # type: ignore[arg-type]
        record["saved"] = {"numpy": save + ".npz", "native": adapter.save_native(save)}


def main(engine: Engine, argv: Sequence[str] | None = None) -> int:
    """Entry point shared by runners/hvd.py, runners/ddp.py and runners/paddle_dp.py."""
    started = time.time()
    args = build_parser(engine).parse_args(argv)
    try:
        spec = spec_from_args(args)
        try:
            labels = records.typed_labels(_labels(args.label))
        except ValueError as exc:
            raise InputError(f"--label: {exc}") from None
        options = _labels(args.engine_option, "--engine-option")
        measure = measure_from_args(args)
        records.check_writable(args.results)
    except (SpecError, InputError, records.RecordsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    # Before the framework is imported below; frameworks already loaded would have read
    # the old values (the record lists them: it must be empty).
    loaded_early = benv.frameworks_loaded(engines.frameworks())
    benv.set_thread_env(spec.threads)
    try:
        adapter = _load_adapter(engine)(spec, args.collective_timeout, options)
        model, dataset, spe = prepare(spec, adapter.expected_world_size())
        engines.check_engine(engine, spec)
        check_device(spec)
    except (SpecError, InputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT

    try:
        adapter.init()
    except (SpecError, InputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    record = records.new_record(
        spec.to_dict(), engine.value, adapter.world_size, labels, _launcher(engine)
    )
    record["threads"] = {"frameworks_before_thread_env": loaded_early}
    record.update(benv.oversubscription(adapter.local_world_size, spec.threads))
    code = 0
    try:
        train(adapter, model, dataset, spe, record, args.quiet, args.save, measure)
    except Diverged as exc:
        record["status"] = records.Status.DIVERGED
        record["error"] = str(exc)
        if adapter.rank == 0:
            print(f"error: diverged: {exc}", file=sys.stderr)
        code = EXIT_DIVERGED
    except Exception as exc:
        silent = PROGRESS.silent_for()
        error = f"{type(exc).__name__}: {exc}\n" + "".join(traceback.format_exc(limit=8))
        record["status"], record["error"] = records.Status.FAILED, error
        if silent >= 0.9 * args.collective_timeout:
            record["status"] = records.Status.TIMEOUT
            record["error"] = (
                f"no progress for {silent:.0f}s (collective time-out {args.collective_timeout:.0f}s):"
                f" a peer stopped answering\n" + error
            )
        print(f"error on rank {adapter.rank}: {type(exc).__name__}: {exc}", file=sys.stderr)
        code = EXIT_FAILED
    stopped = time.time()
    record["run_start"], record["run_stop"] = records.timestamp(started), records.timestamp(stopped)
    if isinstance(labels.get("launched_at"), float):  # set by `bench run`
        record["launch_to_stop_s"] = stopped - labels["launched_at"]
    if adapter.rank == 0:
        try:
            path = records.append(args.results, record)
        except records.RecordsError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_FAILED
        if not args.quiet and code == 0:
            print(
                f"[{engine.value} np={adapter.world_size}] {record['throughput']:,.0f} samples/s, "
                f"test accuracy {record['final_accuracy']:.2%}; record {record['run_id'][:8]} -> {path}",
                flush=True,
            )
    if code in (0, EXIT_DIVERGED):  # every rank stopped at the same step: leave cleanly
        adapter.shutdown()
    return code
