"""The identical-settings contract: one `RunSpec` that every engine receives.

Everything that must be equal across engines lives here, and nothing
engine-specific does. A spec round-trips through JSON, refuses unknown keys and
wrong types, and `validate()` refuses contradictory combinations before
anything is launched.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib.util
import math
import os
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import models
from bench.core.errors import SpecError


class Scaling(str, enum.Enum):
    WEAK = "weak"  # per-worker batch fixed; global batch grows with workers
    STRONG = "strong"  # global batch fixed; per-worker batch shrinks


class Optimizer(str, enum.Enum):
    SGD = "sgd"
    ADAM = "adam"


class LRRule(str, enum.Enum):
    CONSTANT = "constant"  # lr as given at every world size
    LINEAR = "linear"  # lr x (global batch / base global batch) (Goyal et al.)
    SQRT = "sqrt"  # lr x sqrt(global batch / base global batch)


class LRSchedule(str, enum.Enum):
    CONSTANT = "constant"  # the peak rate after warm-up until the end
    COSINE = "cosine"  # cosine decay from the peak to zero over the remaining steps


class GradCompression(str, enum.Enum):
    """How gradients travel in the allreduce; changes the numbers, so it is part of the spec."""

    NONE = "none"
    FP16 = "fp16"  # Horovod's Compression.fp16, DDP's fp16_compress_hook


class BNBuffers(str, enum.Enum):
    """What happens to BatchNorm running statistics across ranks, for every engine alike."""

    LOCAL = "local"  # each rank keeps its own (Horovod's and Paddle's behaviour)
    BROADCAST = "broadcast"  # rank 0's are broadcast before every forward (DDP's default)
    # batch statistics over the global batch (each engine's SyncBatchNorm); GPU only
    SYNC = "sync"


class Precision(str, enum.Enum):
    FP32 = "fp32"
    FP16 = "fp16"
    BF16 = "bf16"


class Device(str, enum.Enum):
    AUTO = "auto"  # cuda where this machine has a CUDA GPU, else cpu; resolved when built
    CPU = "cpu"
    CUDA = "cuda"


def detect_device() -> Device:
    """cuda when this machine has an NVIDIA GPU that the installed torch can use, else cpu.

    Decided without importing a framework (building a spec must stay cheap, and the
    runners set thread variables before any framework loads): a GPU is present when
    the NVIDIA driver lists one (/proc/driver/nvidia/gpus/*, or a /dev/nvidiaN device
    node) and CUDA_VISIBLE_DEVICES does not hide them all; torch can use it when its
    build names a CUDA version (torch/version.py, read as text). Where this guesses
    wrong, `--device cpu|cuda` decides, and the runner refuses cuda without a GPU.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1", "NoDevFiles"):
        return Device.CPU
    gpus = Path("/proc/driver/nvidia/gpus")
    present = (gpus.is_dir() and any(gpus.iterdir())) or any(
        p.name[len("nvidia") :].isdigit() for p in Path("/dev").glob("nvidia[0-9]*")
    )
    return Device.CUDA if present and _torch_cuda_build() else Device.CPU


def _torch_cuda_build() -> bool:
    """Whether the installed torch was built with CUDA, read from torch/version.py as text."""
    try:
        found = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return False
    for folder in (found.submodule_search_locations or []) if found else []:
        try:
            text = (Path(folder) / "version.py").read_text()
        except OSError:
            continue
        match = re.search(r"^cuda\b[^=]*=\s*(.+)$", text, re.MULTILINE)
        return match is not None and match.group(1).strip() not in ("None", "''", '""')
    return False


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """Everything that must be equal across engines for a comparison to be fair.

    `batch_size` is the per-worker batch under weak scaling and the global batch
    under strong scaling. `lr` is the learning rate at the base global batch
    `lr_base_batch` (default: `batch_size`, i.e. the 1-worker global batch), and
    `lr_rule` scales it to the actual global batch; `lr_warmup_epochs` ramps it
    linearly from `lr` to the scaled value, as large-batch recipes do, and
    `lr_schedule` shapes it over the rest of the run.
    """

    model: str = "lenet"
    dataset: str = ""  # empty: the model's own default dataset; resolved when built
    data_path: str | None = None
    batch_size: int = 32
    scaling: Scaling = Scaling.WEAK
    epochs: int = 10
    max_steps: int | None = None  # stop early after this many steps in total
    warmup_steps: int = 5  # first steps excluded from timing
    optimizer: Optimizer = Optimizer.SGD
    lr: float = 0.05
    lr_rule: LRRule = LRRule.LINEAR
    lr_base_batch: int | None = None
    lr_warmup_epochs: float = 0.0
    lr_schedule: LRSchedule = LRSchedule.COSINE
    momentum: float = 0.9
    weight_decay: float = 0.0
    seed: int = 0
    threads: int = 1
    precision: Precision = Precision.FP32
    # fp32 matmuls and convolutions on GPUs in TF32 (10-bit mantissa), where torch and
    # Paddle default differently; False means true fp32 for every engine.
    allow_tf32: bool = False
    device: Device = Device.AUTO
    bucket_mb: float = 25.0  # DDP bucket / Horovod fusion threshold / Paddle comm buffer
    # False runs every engine without its gradient averaging (each rank steps its own
    # replica): the compute-only twin from which `bench compare` derives the share
    # of a step spent in communication that computation does not hide.
    grad_sync: bool = True
    grad_compression: GradCompression = GradCompression.NONE
    augment: bool = True  # the dataset's standard training augmentation, where it has one
    # BatchNorm, where engines quietly differ: momentum in torch's convention (paddle's
    # is 1 - m), epsilon, and the running statistics across ranks.
    bn_momentum: float = 0.1
    bn_eps: float = 1e-5
    bn_buffers: BNBuffers = BNBuffers.LOCAL
    test_fraction: float = 0.2
    synthetic_samples: int = 2048

    # -- construction -------------------------------------------------------------

    def __post_init__(self) -> None:
        # A spec always names its device, so records and cell keys say where it ran.
        if self.device is Device.AUTO:
            object.__setattr__(self, "device", detect_device())
        if not self.dataset:
            try:
                default = models.get(self.model).default_dataset
            except models.UnknownModelError as exc:
                raise SpecError(str(exc)) from None
            object.__setattr__(self, "dataset", default)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunSpec:
        """Build a spec from plain data, refusing unknown keys and wrong types."""
        if not isinstance(data, Mapping):
            raise SpecError(f"a run spec must be a mapping, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(map(str, set(data) - known))
        if unknown:
            raise SpecError(
                f"unknown spec field(s): {', '.join(unknown)}; known fields: {', '.join(sorted(known))}"
            )
        hints = _type_hints(cls)
        values = {name: _coerce(name, hints[name], value) for name, value in data.items()}
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data; enums become their string values."""
        return {
            f.name: (v.value if isinstance(v, enum.Enum) else v)
            for f in dataclasses.fields(self)
            for v in [getattr(self, f.name)]
        }

    def replace(self, **changes: Any) -> RunSpec:
        return RunSpec.from_dict({**self.to_dict(), **changes})

    # -- derived values -----------------------------------------------------------

    def per_worker_batch(self, world_size: int) -> int:
        if self.scaling is Scaling.WEAK:
            return self.batch_size
        if self.batch_size % world_size:
            raise SpecError(
                f"batch_size={self.batch_size} (global, strong scaling) does not divide "
                f"among {world_size} workers; choose a multiple of {world_size}"
            )
        return self.batch_size // world_size

    def global_batch(self, world_size: int) -> int:
        return self.per_worker_batch(world_size) * world_size

    def scaled_lr(self, world_size: int) -> float:
        """Peak learning rate at this world size, after the scaling rule."""
        base = self.lr_base_batch or self.global_batch(1)
        ratio = self.global_batch(world_size) / base
        if self.lr_rule is LRRule.CONSTANT:
            return self.lr
        if self.lr_rule is LRRule.LINEAR:
            return self.lr * ratio
        return float(self.lr * ratio**0.5)

    def lr_at(self, step: int, steps_per_epoch: int, world_size: int, total_steps: int) -> float:
        """Learning rate for global step `step` (0-based): linear warm-up, then the schedule."""
        peak = self.scaled_lr(world_size)
        warm = self.lr_warmup_epochs * steps_per_epoch
        if step < warm:
            return self.lr + (peak - self.lr) * (step / warm)
        if self.lr_schedule is LRSchedule.CONSTANT:
            return peak
        progress = (step - warm) / max(total_steps - warm, 1)
        return float(peak * 0.5 * (1.0 + math.cos(math.pi * progress)))

    # -- checks -------------------------------------------------------------------

    def validate(self, world_size: int | None = None) -> RunSpec:
        """Refuse contradictory settings, naming the field. Returns self."""
        self._check_numbers()
        self._check_combinations()
        if world_size is not None:
            if world_size < 1:
                raise SpecError(f"world size must be >= 1, got {world_size}")
            self.per_worker_batch(world_size)
        return self

    def _check_numbers(self) -> None:
        """Every number within the range where it means something."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):  # built without from_dict
                raise SpecError(f"{f.name} must be a finite number, got {value!r}")
        positive_ints = ["batch_size", "epochs", "threads", "synthetic_samples"]
        for name in positive_ints:
            if getattr(self, name) < 1:
                raise SpecError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.warmup_steps < 0:
            raise SpecError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        if not 0 <= self.seed < 2**32:
            # numpy's SeedSequence refuses negative seeds; torch's and paddle's stop at 2**64;
            # and the seed is one 32-bit word of every random stream's key (bench/core/streams.py)
            raise SpecError(f"seed must be in [0, 2**32), got {self.seed}")
        if self.max_steps is not None and self.max_steps < 1:
            raise SpecError(f"max_steps must be >= 1 when given, got {self.max_steps}")
        if self.max_steps is not None and self.warmup_steps >= self.max_steps:
            raise SpecError(
                f"warmup_steps={self.warmup_steps} leaves no timed step within max_steps="
                f"{self.max_steps}; lower warmup_steps or raise max_steps"
            )
        if not self.lr > 0:
            raise SpecError(f"lr must be > 0, got {self.lr}")
        if self.lr_base_batch is not None and self.lr_base_batch < 1:
            raise SpecError(f"lr_base_batch must be >= 1, got {self.lr_base_batch}")
        if self.lr_warmup_epochs < 0:
            raise SpecError(f"lr_warmup_epochs must be >= 0, got {self.lr_warmup_epochs}")
        if not 0 <= self.momentum < 1:
            raise SpecError(f"momentum must be in [0, 1), got {self.momentum}")
        if self.weight_decay < 0:
            raise SpecError(f"weight_decay must be >= 0, got {self.weight_decay}")
        if not 0 < self.test_fraction < 1:
            raise SpecError(f"test_fraction must be in (0, 1), got {self.test_fraction}")
        if not 0 < self.bn_momentum < 1:
            raise SpecError(
                f"bn_momentum must be in (0, 1) (torch's convention), got {self.bn_momentum}"
            )
        if self.bn_eps <= 0:
            raise SpecError(f"bn_eps must be > 0, got {self.bn_eps}")
        if self.bucket_mb <= 0:
            raise SpecError(f"bucket_mb must be > 0, got {self.bucket_mb}")

    def _check_combinations(self) -> None:
        """Settings that contradict each other or the device."""
        if self.optimizer is Optimizer.ADAM and self.momentum not in (0.0, 0.9):
            raise SpecError(
                "momentum is an SGD setting; leave it at its default with optimizer=adam"
            )
        if self.device is Device.CPU and self.bn_buffers is BNBuffers.SYNC:
            raise SpecError(
                "bn_buffers=sync needs device=cuda: the SyncBatchNorm of torch, Horovod and "
                "Paddle run on GPUs only; on CPU use local or broadcast"
            )
        if self.device is Device.CPU and self.allow_tf32:
            raise SpecError(
                "allow_tf32=true needs device=cuda: TF32 is a GPU tensor-core format; "
                "on CPU leave it false"
            )
        if self.device is Device.CPU and self.precision is Precision.FP16:
            raise SpecError("precision=fp16 needs device=cuda; on CPU use precision=bf16 or fp32")


def _coerce(name: str, hint: Any, value: Any) -> Any:
    """Check (and for enums, convert) one field value against its annotation."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None:
            return None
        return _coerce(name, args[0], value)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except ValueError:
            choices = ", ".join(m.value for m in hint)
            raise SpecError(f"{name}={value!r} is not one of: {choices}") from None
    if hint is bool:
        if not isinstance(value, bool):
            raise SpecError(f"{name} must be true or false, got {value!r}")
        return value
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if hint is float and isinstance(value, float) and not math.isfinite(value):
        # inf/nan parse as floats (argparse, TOML, YAML) but no setting means anything then
        raise SpecError(f"{name} must be a finite number, got {value!r}")
    if hint is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise SpecError(f"{name} must be an integer, got {value!r}")
    if hint in (float, str) and not isinstance(value, hint):
        raise SpecError(f"{name} must be a {hint.__name__}, got {value!r}")
    return value


_HINTS: dict[type, dict[str, Any]] = {}


def _type_hints(cls: type) -> dict[str, Any]:
    """The dataclass's resolved annotations, once: resolving them compiles each one."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]
