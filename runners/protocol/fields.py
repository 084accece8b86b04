"""The record fields of a run, assembled in one place from what every rank measured."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, cast

import numpy as np

from bench import engines, records
from bench.core import machine
from bench.engines import options as engine_options
from bench.measure import energy, peak
from bench.records.types import Epoch, Loss, Peak, RunFields, RunRecord
from runners.adapters.base import EngineAdapter
from runners.protocol import startup
from runners.protocol.state import Result, Run


def progress_fields(
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


def finished_fields(run: Run, result: Result, record: RunRecord) -> RunFields:
    """Every field a finished run adds to its record."""
    adapter = run.adapter
    # engine extras once training is over (e.g. Horovod's timeline): fields RunRecord names
    # every step the engine ran: training, measurement-only, profiled and traced
    ran = run.step + result.steady.extra + int((result.breakdown or {}).get("steps") or 0)
    extras = cast(RunFields, adapter.finish(ran + result.traced.steps))
    traces = result.traced.named(extras.pop("traces", []))
    return {
        **extras,
        # options that change training (not where files go) distinguish runs in compare
        "engine_options": engine_options.training(
            engines.get(adapter.engine).options, adapter.options
        ),
        **progress_fields(
            adapter, run.spe, run.step, run.epochs, run.step_losses, result.train_wall
        ),
        # as each framework and OpenMP runtime reports them, read back after training
        "threads": {
            **record.get("threads", {}),
            **adapter.threads(),
            "openmp": machine.openmp_threads(),
            "frameworks_loaded": machine.frameworks_loaded(engines.frameworks()),
        },
        "hosts": result.hosts,
        **({"breakdown": result.breakdown} if result.breakdown else {}),
        **({"traces": traces} if traces else {}),
        "energy": energy.total(result.energies, result.hosts, _timed_span(result)),
        **cast(RunFields, startup.fields(result.starts, record.get("labels") or {})),
        # Launcher's node count (namespaces share a hostname, so hosts cannot tell).
        "nodes": adapter.world_size // max(adapter.local_world_size, 1),
        "timed_steps": result.step_times.shape[1],
        **_identity_fields(run, result),
        **_resource_fields(run, result),
        **_timing_fields(run, result),
        "final_accuracy": run.epochs[-1]["test_accuracy"],
        "final_loss": run.epochs[-1]["test_loss"],
    }


def _identity_fields(run: Run, result: Result) -> RunFields:
    """What the run trained on and from: the dataset, and fingerprints every engine shares."""
    dataset = run.dataset
    init_fps, final_fps, order_fps = run.init_fps, result.final_fps, result.order_fps
    flops = run.model.flops
    forward = None if flops is None else flops(dataset.input_shape, dataset.num_classes)
    return {
        "dataset": {
            "name": dataset.name,
            "train_samples": len(dataset.train_y),
            "test_samples": len(dataset.test_y),
            "input_shape": list(dataset.input_shape),
            "num_classes": dataset.num_classes,
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
        "flops_per_sample": None if forward is None else {"forward": forward, "train": 3 * forward},
    }


def _resource_fields(run: Run, result: Result) -> RunFields:
    """Memory, CPU use and the input pipeline's cost, per rank."""
    usage, step_times = result.usage, result.step_times
    return {
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
            "augmented": bool(run.adapter.spec.augment and run.dataset.augments),
            "vs_step_time": (
                float(usage[:, 4].max() / (1e3 * np.median(step_times)))
                if step_times.size
                else None
            ),
        },
        # what else used the CPUs while this run was timed, per rank (bench/measure/contention.py)
        "contention": result.loads,
        "contended": any(bool(c and c.get("contended")) for c in result.loads),
    }


def _timing_fields(run: Run, result: Result) -> RunFields:
    """Step and window times of every rank, how measuring stopped, and the throughputs."""
    adapter, steady = run.adapter, result.steady
    per, world = adapter.spec.per_worker_batch(adapter.world_size), adapter.world_size
    n_timed = result.step_times.shape[1]
    n_train_timed = n_timed - steady.extra
    # every rank's window seconds summed: what its timed steps took, synchronised
    per_rank_total = steady.all_windows.sum(axis=1)
    loop_wall = float(result.usage[:, 3].max())
    return {
        "step_times_s": result.step_times.tolist(),
        "window_times_s": steady.all_windows.tolist(),  # [rank][window], one sync per window
        "window_steps": run.window_n,  # each window's throughput: packed.window_throughput
        "measurement": _measurement(run, result),
        "throughput": per * world * n_timed / float(per_rank_total.max()),
        "per_rank_throughput": (per * n_timed / per_rank_total).tolist(),
        # the same samples over the timed loop's wall time, so whatever the harness does
        # between windows counts against it (tests/benchmarks/independent_overhead.py
        # compares it with each engine's documented loop)
        "loop_throughput": (
            per * world * n_train_timed / loop_wall if n_train_timed and loop_wall > 0 else None
        ),
    }


def _measurement(run: Run, result: Result) -> Any:
    measure, steady = run.measure, result.steady
    return {
        "window_steps": measure.window_steps,
        "windows": len(run.window_n),
        "step_clock": run.adapter.step_timer(0).clock,
        "target_ci": measure.target_ci,
        "cap_s": measure.cap_s,
        # target_ci: the interval got narrow enough; time_cap: it did not in time;
        # disabled: training's own windows only
        "stopped_by": steady.stopped_by,
        "window_median": steady.est.value,
        "window_ci": [steady.est.low, steady.est.high],
        "ci_half_width": steady.half,
        "training_timed_steps": result.step_times.shape[1] - steady.extra,
        "extra_steps": steady.extra,  # measurement-only steps after the trained result
    }


def peak_fields(record: RunRecord, results: str) -> RunFields:
    """The machine's measured peak at this run's threads and precision, when it is cached
    beside the results (bench run measures it first; bench peak for runners started by hand).
    The entry says where it came from, so the record does too: the file read (`source`),
    when it was measured, and whether for this folder or copied from the per-user cache
    (`origin`, `copied_from`; bench/measure/peak.py)."""
    spec: dict[str, Any] = cast(dict[str, Any], record.get("spec") or {})
    gpu_mb = (record.get("resources") or {}).get("peak_gpu_mb") or []
    device = str(spec.get("device") or "auto")
    if device not in ("cpu", "cuda"):  # auto: where the run's memory was
        device = "cuda" if any(v is not None for v in gpu_mb) else "cpu"
    gpus = (record.get("env") or {}).get("gpus") or [{}]
    key = peak.this_key(
        int(spec.get("threads") or 1),
        str(spec.get("precision") or "fp32"),
        device,
        cast(str | None, gpus[0].get("name")),
    )
    found = peak.lookup(records.results_file(Path(results)).parent, key)
    return {"peak": cast(Peak, found)} if found else {}


def _timed_span(result: Result) -> float | None:
    """Seconds from the first timed step to the end of measuring (the contention probe's
    span, which the energy meter shares), the longest over ranks."""
    spans = [c.get("seconds") for c in result.loads if isinstance(c, dict)]
    return max((float(x) for x in spans if isinstance(x, int | float)), default=None)
