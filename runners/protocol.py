"""The one training protocol every engine runs, written once.

Order of work, and why:
1. Everything that can be wrong with the input (spec, model, dataset, batch vs
   world size, results location) is checked on every rank *before* any process
   group exists, so bad input fails fast everywhere instead of leaving peers
   hung in a collective.
2. Threads are set before a framework is imported (the adapter module is
   imported only then), identically for every engine.
3. Each rank times only its own training steps (device-synchronised), after
   `warmup_steps`; each epoch's batches are prepared before its loop, losses
   are read back after it, and evaluation is outside the timed region.
   Losses, timings and fingerprints are exchanged once per epoch and once at the
   end, never inside a timed step.
4. Rank 0 appends one record; a failure after start-up is recorded as failed, and
   a loss that becomes NaN/inf (seen by every rank in the per-epoch exchange) stops
   all ranks after that epoch and is recorded as diverged, with the step.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import math
import os
import resource
import socket
import sys
import time
import traceback
from collections.abc import Sequence
from typing import Any

import numpy as np

import models
from bench import data as bdata
from bench import engine_options, records
from bench import env as benv
from bench.checks import InputError, check_device, check_engine, prepare, total_steps
from bench.spec import Engine, SpecError, add_spec_flags, spec_from_args
from runners.engines.base import EngineAdapter

ADAPTERS = {
    Engine.HOROVOD: "runners.engines.torch_engines:HorovodAdapter",
    Engine.DDP: "runners.engines.torch_engines:DDPAdapter",
    Engine.PADDLE: "runners.engines.paddle_engine:PaddleAdapter",
}

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1
EXIT_DIVERGED = 3  # recorded with status diverged


def build_parser(engine: Engine) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"runners/{ {'horovod': 'hvd', 'ddp': 'ddp', 'paddle': 'paddle_dp'}[engine.value] }.py",
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
        help="seconds a collective may wait for a peer before the run fails (default: 300)",
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
        f"{engine.value}: {engine_options.describe(engine)}".replace("%", "%%"),
    )
    parser.add_argument("--quiet", action="store_true", help="no per-epoch progress lines")
    return parser


def _labels(items: Sequence[str], flag: str = "--label") -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError(f"{flag} expects KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def _load_adapter(engine: Engine) -> type[EngineAdapter]:
    module, _, name = ADAPTERS[engine].partition(":")
    try:
        cls: type[EngineAdapter] = getattr(importlib.import_module(module), name)
    except ImportError as exc:
        # e.g. Horovod installed without its PyTorch extension ("has not been built")
        raise InputError(
            f"engine {engine.value} cannot start: {exc}. Run scripts/setup.sh, which installs "
            "torch and paddle and builds Horovod with PyTorch and Gloo support"
        ) from None
    return cls


def _gather_str(adapter: EngineAdapter, text: str, width: int = 128) -> list[str]:
    raw = text.encode()[:width].ljust(width, b"\0")
    rows = adapter.allgather(np.frombuffer(raw, dtype=np.uint8).copy())
    return [bytes(r.astype(np.uint8)).rstrip(b"\0").decode(errors="replace") for r in rows]


def peak_rss_mb() -> float:
    """Peak resident memory of this process (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _launcher() -> dict[str, Any]:
    """Which launcher started this process, and its command line when visible."""
    env = os.environ
    if "TORCHELASTIC_RUN_ID" in env:
        name = "torchrun"
    elif "HOROVOD_RANK" in env:
        name = "horovodrun"
    elif "PADDLE_TRAINER_ID" in env:
        name = "paddle.distributed.launch"
    elif "OMPI_COMM_WORLD_RANK" in env:  # OpenMPI's mpirun (horovodrun --mpi starts it)
        name = "mpirun"
    else:
        name = "none"
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


def train(
    adapter: EngineAdapter,
    model: models.ModelDef,
    dataset: bdata.Dataset,
    spe: int,
    record: dict[str, Any],
    quiet: bool,
    save: str | None,
) -> None:
    """The training protocol proper; fills `record` in place (rank 0's copy is written)."""
    spec, rank, world = adapter.spec, adapter.rank, adapter.world_size
    per = spec.per_worker_batch(world)
    total = total_steps(spec, spe)

    weights = models.init_weights(model, dataset.input_shape, dataset.num_classes, spec.seed)
    adapter.build(model, weights, dataset.input_shape, dataset.num_classes)
    # Taken once every engine's set-up (broadcasts included) is over: what training starts from.
    init_fps = _gather_str(adapter, models.weights_fingerprint(adapter.state()))
    init_opt_state = adapter.optimizer_state_tensors()

    test_idx = bdata.eval_shard(len(dataset.test_y), rank, world)
    order_hash = hashlib.sha256()
    timed: list[float] = []
    epochs: list[dict[str, Any]] = []
    step_losses: list[float] = []
    step = 0
    loop_wall = 0.0
    input_time, input_steps = 0.0, 0
    peak_mb: float | None = None  # training's peak device memory, staged batches excluded
    staged_mb: float | None = None
    wall0 = time.perf_counter()
    cpu0 = time.process_time()  # all threads of this process: compute, gloo, horovod's
    tag = f"[{adapter.engine.value} np={world}]"
    for epoch in range(spec.epochs):
        order = bdata.epoch_order(spec.seed, epoch, len(dataset.train_y))
        # The epoch's batches and learning rates are prepared before its loop, so the
        # loop does what a hand-written one does: step, synchronise, time.
        n_steps = min(spe, total - step)
        before_mb = adapter.device_memory_mb()
        plan = []
        t_in = time.perf_counter()  # the input pipeline: indices, augmentation, tensors
        for s in range(n_steps):
            idx = bdata.shard(order, s, rank, per, world)
            order_hash.update(idx.astype(np.int64).tobytes())
            x = (
                bdata.augment(dataset, idx, spec.seed, epoch)
                if spec.augment
                else dataset.train_x[idx]
            )
            batch = adapter.to_batch(x, dataset.train_y[idx])
            plan.append((batch, spec.lr_at(step + s, spe, world, total)))
        input_time += time.perf_counter() - t_in
        input_steps += n_steps
        # The staged copies land before the first timed step, and the peak-memory window
        # covers training only: not the staged epoch (subtracted), not evaluation.
        adapter.synchronize()
        after_mb = adapter.device_memory_mb()
        adapter.reset_peak_device_memory()
        pending: list[Any] = []  # loss tensors, read back after the loop (no per-step sync)
        train_time = 0.0
        mark = None  # wall clock of the timed steps, harness work between them included
        for batch, lr in plan:
            if mark is None and step >= spec.warmup_steps:
                mark = time.perf_counter()
            t0 = time.perf_counter()
            pending.append(adapter.train_step(batch, lr))
            adapter.synchronize()
            dt = time.perf_counter() - t0
            train_time += dt
            if step >= spec.warmup_steps:
                timed.append(dt)
            step += 1
        if mark is not None:
            loop_wall += time.perf_counter() - mark
        epoch_peak = adapter.peak_device_memory_mb()
        if epoch_peak is not None and before_mb is not None and after_mb is not None:
            staged_mb = max(staged_mb or 0.0, after_mb - before_mb)
            peak_mb = max(peak_mb or 0.0, epoch_peak - (after_mb - before_mb))
        del plan
        losses = [adapter.loss_value(loss) for loss in pending]
        # Once per epoch: every rank's step losses and time, and global test metrics.
        all_losses = adapter.allgather(np.asarray(losses, dtype=np.float64))
        epoch_step_losses = all_losses.mean(axis=0).tolist()
        step_losses.extend(epoch_step_losses)
        slowest = float(adapter.allgather(np.asarray([train_time]))[:, 0].max())
        loss_sum, correct, count = adapter.evaluate(
            dataset.test_x[test_idx], dataset.test_y[test_idx]
        )
        ev = adapter.allreduce_sum(np.asarray([loss_sum, correct, count], dtype=np.float64))
        entry = {
            "epoch": epoch,
            "steps": len(losses),
            "samples_seen": step * per * world,
            "train_loss": float(np.mean(epoch_step_losses)),
            "test_loss": float(ev[0] / ev[2]),
            "test_accuracy": float(ev[1] / ev[2]),
            "train_time_s": slowest,
            "elapsed_s": time.perf_counter() - wall0,  # since training began
            "samples_per_s": len(losses) * per * world / slowest if slowest > 0 else None,
        }
        epochs.append(entry)
        if rank == 0 and not quiet:
            print(
                f"{tag} epoch {epoch + 1}/{spec.epochs}  samples {entry['samples_seen']:,}  "
                f"loss {entry['train_loss']:.4f}  test_acc {entry['test_accuracy']:.2%}  "
                f"{entry['samples_per_s']:,.0f} samples/s",
                flush=True,
            )
        if not all(map(math.isfinite, [*epoch_step_losses, entry["test_loss"]])):
            # Every rank holds the same gathered losses, so all stop here together.
            first = next((i for i, v in enumerate(epoch_step_losses) if not math.isfinite(v)), None)
            at = step - len(losses) + (len(losses) - 1 if first is None else first)
            what = "test loss" if first is None else "training loss"
            value = entry["test_loss"] if first is None else epoch_step_losses[first]
            record.update(
                {
                    "engine_versions": adapter.versions(),
                    "knobs": adapter.knobs(),
                    "per_worker_batch": per,
                    "global_batch": per * world,
                    "steps_per_epoch": spe,
                    "steps": step,
                    "lr_peak": spec.scaled_lr(world),
                    "diverged_at_step": at,
                    "epochs": epochs,
                    "step_losses": step_losses,
                    "training_wall_s": time.perf_counter() - wall0,
                }
            )
            raise Diverged(
                f"{what} became {value} at step {at} (0-based) of {total}; lower --lr "
                f"(peak {spec.scaled_lr(world):g} at this world size) or add --lr-warmup-epochs"
            )
        if step >= total:
            break

    busy = (time.process_time() - cpu0) / max(time.perf_counter() - wall0, 1e-9)
    gpu_mb = peak_mb
    usage = adapter.allgather(
        np.asarray(
            [
                peak_rss_mb(),
                busy,
                np.nan if gpu_mb is None else gpu_mb,
                loop_wall,
                1e3 * input_time / max(input_steps, 1),
                np.nan if staged_mb is None else staged_mb,
            ],
            dtype=np.float64,
        )
    )
    step_times = adapter.allgather(np.asarray(timed, dtype=np.float64))  # [world, n_timed]
    per_rank_total = step_times.sum(axis=1)
    n_timed = step_times.shape[1]
    final_state = adapter.state()
    final_fps = _gather_str(adapter, models.weights_fingerprint(final_state))
    order_fps = _gather_str(adapter, order_hash.hexdigest()[:16])
    hosts = _gather_str(adapter, socket.gethostname())
    adapter.barrier()
    record.update(adapter.finish(step))
    # options that change training (not where files go) distinguish runs in compare
    record["engine_options"] = {k: v for k, v in adapter.options.items() if k != "timeline"}

    record.update(
        {
            "engine_versions": adapter.versions(),
            "knobs": adapter.knobs(),
            "threads": adapter.threads(),
            "hosts": hosts,
            # Launcher's node count (namespaces share a hostname, so hosts cannot tell).
            "nodes": world // max(adapter.local_world_size, 1),
            "per_worker_batch": per,
            "global_batch": per * world,
            "steps_per_epoch": spe,
            "steps": step,
            "timed_steps": n_timed,
            "lr_peak": spec.scaled_lr(world),
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
                "init_optimizer_state_tensors": init_opt_state,
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
                "peak_gpu_mb": None if gpu_mb is None else usage[:, 2].tolist(),
                "staged_batches_gpu_mb": None if staged_mb is None else usage[:, 5].tolist(),
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
            "throughput": per * world * n_timed / float(per_rank_total.max()),
            "per_rank_throughput": (per * n_timed / per_rank_total).tolist(),
            # the same samples over the timed loop's wall time, so whatever the harness does
            # between steps counts against it (compared with hand-written loops in
            # tests/benchmarks/overhead.py)
            "loop_throughput": per * world * n_timed / float(usage[:, 3].max()),
            "flops_per_sample": (
                None
                if model.flops is None
                else {
                    "forward": (f := model.flops(dataset.input_shape, dataset.num_classes)),
                    "train": 3 * f,
                }
            ),
            "epochs": epochs,
            "step_losses": step_losses,
            "final_accuracy": epochs[-1]["test_accuracy"],
            "final_loss": epochs[-1]["test_loss"],
            # the training phase: first batch prepared to last result gathered
            "training_wall_s": time.perf_counter() - wall0,
        }
    )
    if save and rank == 0:
        np.savez(save + ".npz", **final_state)  # type: ignore[arg-type]
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
        records.check_writable(args.results)
    except (SpecError, InputError, records.RecordsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    benv.set_thread_env(spec.threads)  # before the framework is imported below
    try:
        adapter = _load_adapter(engine)(spec, args.collective_timeout, options)
        model, dataset, spe = prepare(spec, adapter.expected_world_size())
        check_engine(engine, spec)
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
        spec.to_dict(), engine.value, adapter.world_size, labels, _launcher()
    )
    record.update(benv.oversubscription(adapter.local_world_size, spec.threads))
    code = 0
    try:
        train(adapter, model, dataset, spe, record, args.quiet, args.save)
    except Diverged as exc:
        record["status"] = records.Status.DIVERGED
        record["error"] = str(exc)
        if adapter.rank == 0:
            print(f"error: diverged: {exc}", file=sys.stderr)
        code = EXIT_DIVERGED
    except Exception as exc:
        record["status"] = records.Status.FAILED
        record["error"] = f"{type(exc).__name__}: {exc}\n" + "".join(traceback.format_exc(limit=8))
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
