"""A training run's state on one rank: its set-up, and what its epochs accumulate."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from typing import Any

import numpy as np

import models
from bench.contract import data as bdata
from bench.measure import contention, energy
from bench.measure.window import Measure
from bench.records.types import Epoch, Loss
from models.base import Weights
from runners.adapters.base import EngineAdapter
from runners.protocol import startup
from runners.protocol.timing import Steady
from runners.protocol.trace import Traced


@dataclasses.dataclass
class Run:
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
    meter: energy.Meter | None = None  # energy over the same span as the contention probe

    def first_timed(self) -> None:
        """What else uses the CPUs, from the first timed step on."""
        if self.busy0 is None:
            self.busy0 = contention.snapshot(self.root)
            self.meter = energy.Meter(self.adapter.local_rank == 0, _gpu_index(self.adapter))
            self.meter.start()
        startup.CLOCK.mark("first_timed")

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


@dataclasses.dataclass
class Result:
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
    starts: list[Any]  # every rank's start-up marks (runners/protocol/startup.py)
    energies: list[Any]  # every rank's energy over the timed span (bench/measure/energy.py)
    breakdown: dict[str, Any] | None = None  # profiled steps' phases (runners/protocol/profile.py)
    # the traced steps' files (runners/protocol/trace.py)
    traced: Traced = dataclasses.field(default_factory=lambda: Traced([]))


def _gpu_index(adapter: EngineAdapter) -> int | None:
    """NVML's index of this rank's GPU (its local rank through CUDA_VISIBLE_DEVICES); None on CPU."""
    if adapter.device_memory_mb() is None:
        return None
    visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if visible and all(v.strip().isdigit() for v in visible):
        return int(visible[adapter.local_rank % len(visible)])
    return adapter.local_rank
