"""One rank's training run: set-up from the shared weights, the epochs, the trained result.

Each epoch's batches are prepared before its timed loop (runners/protocol/timing.py);
losses, timings and fingerprints are exchanged once per epoch and once at the end,
never inside a window. A loss that becomes NaN/inf (seen by every rank in the
per-epoch exchange) stops all ranks after that epoch.
"""

from __future__ import annotations

import math
import socket
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import models
from bench.contract import data as bdata
from bench.contract.prepare import total_steps
from bench.measure import contention
from bench.measure.window import Measure
from bench.records.types import Epoch, RunRecord
from runners.adapters.base import EngineAdapter
from runners.protocol import startup
from runners.protocol.common import gather_json, gather_str, peak_rss_mb
from runners.protocol.fields import finished_fields, progress_fields
from runners.protocol.profile import WAITS_S_PER_PROFILED_STEP, profile, waits
from runners.protocol.state import Result, Run
from runners.protocol.timing import PROGRESS, measure_until_steady, timed_loop
from runners.protocol.trace import Traced, TraceTo, traced


class Diverged(Exception):
    """A loss became NaN or infinite: the run stops and is recorded as diverged."""


def start(
    adapter: EngineAdapter,
    model: models.ModelDef,
    dataset: bdata.Dataset,
    spe: int,
    measure: Measure,
) -> Run:
    """Build the model from the shared initial weights and fingerprint what training
    starts from, once every engine's set-up (broadcasts included) is over."""
    spec = adapter.spec
    weights = models.init_weights(model, dataset.input_shape, dataset.num_classes, spec.seed)
    PROGRESS.mark()
    adapter.build(model, weights, dataset.input_shape, dataset.num_classes)
    PROGRESS.mark()
    startup.CLOCK.mark("built")
    init_fps = gather_str(adapter, models.weights_fingerprint(adapter.state()))
    init_opt_state = adapter.optimizer_state_tensors()
    test_idx = bdata.eval_shard(len(dataset.test_y), adapter.rank, adapter.world_size)
    root = contention.run_tree_root()
    # wall0 and cpu0 start here, as the run's clock
    return Run(
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


def epoch_of(run: Run, epoch: int) -> tuple[Epoch, list[float]]:
    """One epoch: its batches prepared, its timed loop, then once every rank's step losses
    and time and the global test metrics. Returns its entry and the mean step losses."""
    adapter, spec = run.adapter, run.adapter.spec
    n_steps = min(run.spe, run.total - run.step)
    before_mb = adapter.device_memory_mb()
    plan = _prepare_epoch(run, epoch, n_steps)
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
    return _epoch_entry(run, epoch, loop.losses, loop.train_time)


def _prepare_epoch(run: Run, epoch: int, n_steps: int) -> list[tuple[Any, float]]:
    """The epoch's batches and learning rates, prepared before its loop, so that the loop
    does what a hand-written one does: step, and synchronise once a window."""
    spec, world = run.adapter.spec, run.adapter.world_size
    order = bdata.epoch_order(spec.seed, epoch, len(run.dataset.train_y))
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
    return plan


def _epoch_entry(
    run: Run, epoch: int, device_losses: list[Any], train_time: float
) -> tuple[Epoch, list[float]]:
    """Once per epoch: every rank's step losses and time, and global test metrics."""
    adapter, dataset = run.adapter, run.dataset
    per, world = adapter.spec.per_worker_batch(adapter.world_size), adapter.world_size
    losses = [adapter.loss_value(loss) for loss in device_losses]
    all_losses = adapter.allgather(np.asarray(losses, dtype=np.float64))
    epoch_step_losses = all_losses.mean(axis=0).tolist()
    run.step_losses.extend(epoch_step_losses)
    slowest = float(adapter.allgather(np.asarray([train_time]))[:, 0].max())
    loss_sum, correct, count = adapter.evaluate(
        dataset.test_x[run.test_idx], dataset.test_y[run.test_idx]
    )
    ev = adapter.allreduce_sum(np.asarray([loss_sum, correct, count], dtype=np.float64))
    PROGRESS.mark()
    # At the resolution they were measured, as the step series are stored: times in
    # microseconds, losses in float32 (what every framework computes them in).
    slowest = round(slowest, 6)
    entry: Epoch = {
        "epoch": epoch,
        "steps": len(losses),
        "samples_seen": run.step * per * world,
        "train_loss": _f32(np.mean(epoch_step_losses)),
        "test_loss": _f32(ev[0] / ev[2]),
        "test_accuracy": float(ev[1] / ev[2]),
        "train_time_s": slowest,
        "elapsed_s": round(time.perf_counter() - run.wall0, 6),  # since training began
        "samples_per_s": (round(len(losses) * per * world / slowest, 3) if slowest > 0 else None),
    }
    run.epochs.append(entry)
    return entry, epoch_step_losses


def _f32(value: Any) -> float:
    """`value` at float32 precision, as the shortest decimal that reads back as that
    float32 (NaN and infinities stay as they are; beyond float32's range, infinite)."""
    with np.errstate(over="ignore"):
        return float(str(np.float32(value)))


def check_finite(run: Run, entry: Epoch, epoch_step_losses: list[float], record: RunRecord) -> None:
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
    record.update(progress_fields(adapter, run.spe, run.step, run.epochs, run.step_losses, wall))
    record["diverged_at_step"] = at
    raise Diverged(
        f"{what} became {value} at step {at} (0-based) of {run.total}; lower --lr "
        f"(peak {spec.scaled_lr(adapter.world_size):g} at this world size) or add "
        "--lr-warmup-epochs"
    )


def finish(run: Run, trace_to: TraceTo | None = None) -> Result:
    """The trained result, then measurement-only windows until throughput is steady
    (`measure_until_steady`), then the profiled and traced steps, then what every rank
    measured, gathered."""
    adapter, spec, measure = run.adapter, run.adapter.spec, run.measure
    world = adapter.world_size
    per = spec.per_worker_batch(world)
    # The trained result, before any measurement-only steps change the weights.
    final_state = adapter.state()
    final_fps = gather_str(adapter, models.weights_fingerprint(final_state))
    train_wall = time.perf_counter() - run.wall0

    next_chunk = _after_training_windows(run)
    steady = measure_until_steady(
        adapter, measure, per * world, run.timed, run.window_s, run.window_n, next_chunk
    )
    busy1 = contention.snapshot(run.root)
    spent = run.meter.stop() if run.meter is not None else []

    busy = (time.process_time() - run.cpu0) / max(time.perf_counter() - run.wall0, 1e-9)
    breakdown, kept = _after_timed(run, next_chunk, trace_to)
    usage = _gather_usage(run, busy)
    step_times = adapter.allgather(np.asarray(run.timed, dtype=np.float64))  # [world, n_timed]
    order_fps = gather_str(adapter, run.order_hash.hexdigest()[:16])
    hosts = gather_str(adapter, socket.gethostname())
    loads = gather_json(adapter, contention.summarise(run.busy0, busy1))
    starts = gather_json(adapter, startup.CLOCK.snapshot())
    energies = gather_json(adapter, spent, width=4096)
    adapter.barrier()
    return Result(
        final_state,
        final_fps,
        train_wall,
        steady,
        usage,
        step_times,
        order_fps,
        hosts,
        loads,
        starts,
        energies,
        breakdown,
        kept,
    )


def _after_training_windows(run: Run) -> Callable[[], list[tuple[Any, float]]]:
    """The batches of the measurement-only windows, one window's at each call: the data
    of the epochs after training, each in its own order, at training's last learning
    rate."""
    adapter, dataset, spec, measure = run.adapter, run.dataset, run.adapter.spec, run.measure
    spe = run.spe
    extra_epoch, extra_pos = spec.epochs, spe
    extra_order = np.zeros(0, dtype=np.int64)
    last_lr = spec.lr_at(run.total - 1, spe, adapter.world_size, run.total)

    def next_chunk() -> list[tuple[Any, float]]:
        nonlocal extra_epoch, extra_pos, extra_order
        if extra_pos >= spe:
            extra_order = bdata.epoch_order(spec.seed, extra_epoch, len(dataset.train_y))
            extra_epoch, extra_pos = extra_epoch + 1, 0
        span = range(extra_pos, min(extra_pos + measure.window_steps, spe))
        extra_pos = span.stop
        return [(b, last_lr) for b in run.batches(extra_epoch - 1, extra_order, span, False)]

    return next_chunk


def _gather_usage(run: Run, busy: float) -> np.ndarray:
    """Every rank's resource use, one row each (the columns of `Result.usage`)."""
    return run.adapter.allgather(
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


def _after_timed(
    run: Run, next_chunk: Any, trace_to: TraceTo | None
) -> tuple[dict[str, Any] | None, Traced]:
    """The profiled steps (the breakdown), then the traced ones, which only run where
    the profiled ones did: after every timed window and the contention and energy spans,
    never in a throughput, and the profiler never around a phase the breakdown reads."""
    adapter, measure = run.adapter, run.measure
    breakdown = profile(adapter, _chunks(next_chunk, measure.profile_steps))
    if breakdown is not None:  # who waits for whom, long enough to see a rank stopped
        seconds = WAITS_S_PER_PROFILED_STEP * measure.profile_steps
        batches = [batch for batch, _ in _chunks(next_chunk, _CHUNK_BATCHES)]
        found = waits(adapter, batches, seconds)
        if found is not None:
            breakdown["waits"] = found
    # one more step first, untraced: it shows the phases' order (runners/protocol/trace.py)
    n = measure.trace_steps + 1 if breakdown and measure.trace_steps else 0
    return breakdown, traced(adapter, _chunks(next_chunk, n), trace_to)


# the batches the waits probe cycles over: its timing, not its data, is what it reads
_CHUNK_BATCHES = 10


def _chunks(next_chunk: Any, n: int) -> list[tuple[Any, float]]:
    """`n` prepared steps from `next_chunk`'s windows of steps."""
    steps: list[tuple[Any, float]] = []
    while len(steps) < n:
        steps.extend(next_chunk())
    return steps[:n]


def train(
    adapter: EngineAdapter,
    model: models.ModelDef,
    dataset: bdata.Dataset,
    spe: int,
    record: RunRecord,
    quiet: bool,
    save: str | None,
    measure: Measure | None = None,
    trace_to: TraceTo | None = None,
) -> None:
    """The training protocol proper; fills `record` in place (rank 0's copy is written).

    Set-up (`start`), the epochs (`epoch_of`, each a `timed_loop` of `timed_window`s, a
    diverged loss stopping every rank after its epoch), measurement until steady and
    the gathered results (`finish`), then the record's fields (`finished_fields`).
    """
    run = start(adapter, model, dataset, spe, measure or Measure())
    spec, world = adapter.spec, adapter.world_size
    tag = f"[{adapter.engine.value} np={world}]"
    for epoch in range(spec.epochs):
        entry, epoch_step_losses = epoch_of(run, epoch)
        if adapter.rank == 0 and not quiet:
            print(
                f"{tag} epoch {epoch + 1}/{spec.epochs}  samples {entry['samples_seen']:,}  "
                f"loss {entry['train_loss']:.4f}  test_acc {entry['test_accuracy']:.2%}  "
                f"{entry['samples_per_s']:,.0f} samples/s",
                flush=True,
            )
        check_finite(run, entry, epoch_step_losses, record)
        if run.step >= run.total:
            break
    result = finish(run, trace_to)
    record.update(finished_fields(run, result, record))
    if save and adapter.rank == 0:
        np.savez(save + ".npz", **result.final_state)  # type: ignore[arg-type]
        record["saved"] = {"numpy": save + ".npz", "native": adapter.save_native(save)}
