"""The adapter contract: what an engine must supply to the shared training protocol.

The protocol (runners/protocol/) owns the loop, timing, data order,
evaluation, gathering and the record; an adapter only translates those into its
framework. Adding a fourth engine is one new adapter file and one entry script.
"""

from __future__ import annotations

import abc
import itertools
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench import engines
from bench.contract.spec import RunSpec
from bench.engines import Engine
from bench.records.types import Trace
from models.base import ModelDef, Shape, Weights

# fp16 loss scaling, one setting for every engine, stated explicitly (torch's defaults;
# Paddle 3.3's GradScaler defaults equal them, its base AmpScaler's do not).
LOSS_SCALER: dict[str, Any] = {
    "init_scale": 2.0**16,
    "growth_factor": 2.0,
    "backoff_factor": 0.5,
    "growth_interval": 2000,
}


class StepTimer:
    """Per-step times inside one timed window, without waiting for the device.

    The protocol calls `mark()` before each step and once after the last, then
    synchronises the device once, then reads `step_times()`. This one reads the
    host clock: on CPU that is the step's time; on a GPU it is only when the host
    queued the step, so GPU adapters return a timer built on device events.
    """

    def __init__(self) -> None:
        self._marks: list[float] = []

    def mark(self) -> None:
        self._marks.append(time.perf_counter())

    def step_times(self) -> list[float]:
        """Seconds per step (call after the window's synchronisation)."""
        return [b - a for a, b in itertools.pairwise(self._marks)]

    clock = "host"


class PhaseClock:
    """One profiled step's phases: `mark(name)` ends the phase running since the last mark.

    Each mark waits for the device first, so on a GPU the phase is its kernels' time;
    it is used only in the profiled steps after the timed windows, never inside one.
    """

    def __init__(self, synchronize: Any) -> None:
        self._sync = synchronize
        self._last = time.perf_counter()
        self.phases: dict[str, float] = {}

    def mark(self, name: str) -> None:
        self._sync()
        now = time.perf_counter()
        self.phases[name] = self.phases.get(name, 0.0) + now - self._last
        self._last = now


def _nothing() -> None:
    """The end of a range in a trace that records nothing."""


class Tracer:
    """An engine's own profiler around the traced steps (runners/protocol/trace.py).

    Every rank makes one, since a profiler may need every rank (Horovod's timeline
    does); `start()` comes before the traced steps and `stop()` after them, and writes
    the files, named as record entries (path, format, tool). `span(name)` opens a range
    named `name` in the trace and returns what closes it. This one traces nothing: the
    default of an engine without a profiler, and of a rank that keeps no trace.
    """

    tool = "none"

    def start(self) -> None:
        """Begin recording."""

    def span(self, name: str) -> Callable[[], None]:
        return _nothing

    def stop(self) -> list[Trace]:
        """Stop recording and write the trace; the files written, as record entries."""
        return []


class PhaseSpans(PhaseClock):
    """A traced step's phases, as ranges named forward, backward, ... in the engine's trace.

    The same marks as a profiled step (`EngineAdapter._phase`), so every engine's trace
    carries its phases with no code of its own. A mark ends a phase and a range is named
    when it opens, so ranges open in `order`, the phases as a step marked them before
    tracing began (a step marks the same phases every time), each closed at its mark; a
    range named "step" spans the whole step. `close()` ends whatever is still open.
    """

    def __init__(self, synchronize: Any, tracer: Tracer, order: Sequence[str]) -> None:
        super().__init__(synchronize)
        self._tracer, self._order = tracer, iter(order)
        self._step = tracer.span("step")
        self._end = self._open()

    def _open(self) -> Callable[[], None] | None:
        name = next(self._order, None)
        return None if name is None else self._tracer.span(name)

    def mark(self, name: str) -> None:
        super().mark(name)
        if self._end is not None:
            self._end()
        self._end = self._open()

    def close(self) -> None:
        if self._end is not None:
            self._end()
            self._end = None
        self._step()
        self._step = _nothing


class CommProbe:
    """Total communication time over the profiled steps, as the engine's own hooks see it.

    `stop()` returns the seconds of the union of the collectives' busy intervals (the
    wall time during which a gradient collective was in flight), or None where the
    engine offers no hook; `source` says how it was measured, or why it was not.
    """

    source = "not measured: this engine exposes no hook on its gradient collectives"

    def __init__(self, source: str | None = None) -> None:
        if source is not None:
            self.source = source

    def stop(self) -> float | None:
        return None


def union_seconds(spans: list[tuple[float, float]]) -> float:
    """Length of the union of [start, end] intervals: concurrent collectives count once."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total


def announced_size(engine: Engine) -> int:
    """World size as the launcher announced it (1 where none did), read from its variables
    before the framework loads or any collective starts; the protocol refuses a started
    world of another size."""
    announced = engines.announced_world(engine, os.environ)
    return announced.size if announced else 1


class EngineAdapter(abc.ABC):
    engine: Engine
    # Set by the profiled steps (runners/protocol/profile.py) and None otherwise: the
    # timed steps pay one attribute test per phase.
    phase_clock: PhaseClock | None = None
    # Whether this run will profile steps; an engine whose probe must be armed before
    # its process group starts (Horovod's dynamic timeline) reads it in init().
    profile_comm: bool = False

    def __init__(
        self, spec: RunSpec, timeout_s: float = 300.0, options: dict[str, str] | None = None
    ) -> None:
        self.spec = spec
        self.timeout_s = timeout_s  # longest a collective may wait for a peer before failing
        self.options = dict(options or {})
        # Engine-specific knobs outside the shared contract (--engine-option KEY=VALUE),
        # declared in the engine's registry entry, where `bench run` checks them too.
        engines.check_options(self.engine, self.options)
        self.rank = 0
        self.local_rank = 0
        self.world_size = 1
        self.local_world_size = 1  # workers on this rank's node; world / local = nodes

    def expected_world_size(self) -> int:
        """World size as the launcher announced it (announced_size)."""
        return announced_size(self.engine)

    @abc.abstractmethod
    def init(self) -> None:
        """Join the process group; set rank, local_rank, world_size and local_world_size."""

    @abc.abstractmethod
    def build(self, model: ModelDef, weights: Weights, input_shape: Shape, classes: int) -> None:
        """Build the model from the shared numpy weights, wrap it and its optimizer."""

    @abc.abstractmethod
    def to_batch(self, x: np.ndarray, y: np.ndarray) -> Any:
        """Framework tensors for one batch (outside the timed region)."""

    @abc.abstractmethod
    def train_step(self, batch: Any, lr: float) -> Any:
        """Forward, backward, gradient averaging and optimizer step; returns the local loss."""

    @abc.abstractmethod
    def local_step(self, batch: Any) -> None:
        """This rank's own work of a step, forward and backward, with no gradient
        communication and no change to the weights, gradients or optimizer: what the
        waits probe times from a common start (runners/protocol/profile.py)."""

    @abc.abstractmethod
    def loss_value(self, loss: Any) -> float: ...

    @abc.abstractmethod
    def evaluate(self, x: np.ndarray, y: np.ndarray) -> tuple[float, int, int]:
        """(summed loss, number correct, number of predictions) on this rank's test shard.

        A classifier predicts once per sample; a language model once per token.
        """

    @abc.abstractmethod
    def state(self) -> Weights:
        """Current parameters as numpy arrays in the canonical (torch) layout."""

    @abc.abstractmethod
    def save_native(self, stem: str) -> str:
        """Write the weights in the framework's own format; returns the path."""

    @abc.abstractmethod
    def allreduce_sum(self, arr: np.ndarray) -> np.ndarray: ...

    @abc.abstractmethod
    def allgather(self, arr: np.ndarray) -> np.ndarray:
        """Stack every rank's equally-shaped array: result shape [world, *arr.shape]."""

    @abc.abstractmethod
    def barrier(self) -> None: ...

    @abc.abstractmethod
    def buffer(self, nbytes: int) -> Any:
        """A float32 device tensor of `nbytes` for the collective benchmark."""

    @abc.abstractmethod
    def allreduce_inplace(self, buf: Any) -> None:
        """Sum-allreduce `buf` in place with the engine's own collective, as training uses it."""

    def _phase(self, name: str) -> None:
        """End phase `name` of a profiled step (forward, backward, optimizer); no-op otherwise."""
        if self.phase_clock is not None:
            self.phase_clock.mark(name)

    def comm_probe(self) -> CommProbe:
        """Start timing this engine's gradient collectives for the profiled steps."""
        return CommProbe()

    def tracer(self, folder: Path, keep: bool) -> Tracer:
        """The engine's profiler for the traced steps, writing its files into `folder`
        when `keep` (this rank keeps a trace); the default traces nothing."""
        return Tracer()

    def synchronize(self) -> None:  # noqa: B027 (optional hook: CPU engines need nothing)
        """Wait for all queued device work (no-op on CPU); called once per timed window."""

    def step_timer(self, steps: int) -> StepTimer:
        """A timer for a window of `steps` steps, created before the window starts.

        The default reads the host clock; an adapter on a GPU overrides it with device
        events, so that per-step times need no synchronisation inside the window.
        """
        return StepTimer()

    @abc.abstractmethod
    def versions(self) -> dict[str, Any]:
        """The engine's library versions and build facts."""

    @abc.abstractmethod
    def knobs(self) -> dict[str, Any]:
        """Engine settings with differing defaults, as actually used in this run."""

    @abc.abstractmethod
    def threads(self) -> dict[str, Any]:
        """Threads as the framework reports them after setup."""

    def finish(self, steps: int) -> dict[str, Any]:
        """Engine extras for the record once the run's `steps` steps are over (training,
        measurement-only and profiled ones; e.g. a timeline's per-step figures)."""
        return {}

    def peak_device_memory_mb(self) -> float | None:
        """Peak accelerator memory allocated by this rank since the last reset; None on CPU."""
        return None

    def device_memory_mb(self) -> float | None:
        """Accelerator memory allocated by this rank now; None on CPU."""
        return None

    def reset_peak_device_memory(self) -> None:  # noqa: B027 (optional hook: CPU needs nothing)
        """Start a new peak-memory window at the memory allocated now."""

    @abc.abstractmethod
    def optimizer_state_tensors(self) -> int:
        """How many state tensors the optimizer holds (0 for a fresh one: nothing seeded)."""

    def eval_batches(self, n: int) -> list[slice]:
        """Evaluation slices of `n` samples, each the per-worker training batch.

        Evaluating in training-sized batches keeps its memory within training's (one
        forward over a whole test split can need gigabytes), and every engine
        evaluates the same slices.
        """
        size = self.spec.per_worker_batch(self.world_size)
        return [slice(i, i + size) for i in range(0, n, size)]

    def shutdown(self) -> None:  # noqa: B027 (optional hook)
        """Leave the process group cleanly."""
