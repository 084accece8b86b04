"""The torch half shared by the DDP and Horovod adapters: model, optimizer, step, evaluation.

Both engines train the very same torch module; they differ only in how the process
group starts, how gradients are averaged and which collectives the protocol uses
(ddp_engine.py, horovod_engine.py). Keeping the shared half in one base class is
what makes their loss trajectories comparable to float rounding.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

# DDP's wrapper and the optimizers load it at first use anyway (0.8 s): loaded here, it
# is among the imports the runner freezes out of the collector's sight (protocol/main.py)
import torch._dynamo
import torch.nn.functional as F
import torch.profiler

from bench.contract.spec import Device, GradCompression, Optimizer, Precision
from bench.core import machine
from bench.core.errors import SpecError
from bench.records.types import Trace
from models.base import ModelDef, Shape, Weights
from runners.adapters.base import LOSS_SCALER, EngineAdapter, StepTimer, Tracer
from runners.adapters.fp16_compression import FP16_COMPRESSION


def _loss(logits: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy over every prediction: one per sample, or one per token for an LM."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction=reduction)


AMP_DTYPES = {Precision.FP16: torch.float16, Precision.BF16: torch.bfloat16}


def _set_fp32_maths(allow_tf32: bool) -> None:
    """Set how fp32 matmuls and convolutions compute, instead of inheriting torch's defaults.

    torch defaults to TF32 convolutions (cuDNN) but IEEE fp32 matmuls (cuBLAS); Paddle
    to TF32 for both. The suite sets every engine to the spec's `allow_tf32`, with
    cuDNN's autotuner (benchmark) and deterministic mode off, which both frameworks
    default to. Only torch's per-backend `fp32_precision` API is used: torch 2.13
    refuses reads once it is mixed with the legacy `allow_tf32` flags. CPU (oneDNN)
    kernels stay IEEE fp32.
    """
    mode = "tf32" if allow_tf32 else "ieee"
    backends: Any = torch.backends  # per-backend leaves are attached at run time
    backends.cuda.matmul.fp32_precision = mode
    backends.cudnn.conv.fp32_precision = mode
    backends.cudnn.rnn.fp32_precision = mode
    for leaf in (backends.mkldnn.matmul, backends.mkldnn.conv, backends.mkldnn.rnn):
        leaf.fp32_precision = "ieee"
    backends.cudnn.benchmark = False
    backends.cudnn.deterministic = False


def fp32_maths() -> dict[str, Any]:
    """How fp32 maths ran, read back from torch (the `math` knobs every engine records)."""
    backends: Any = torch.backends  # per-backend leaves are attached at run time
    return {
        "tf32_matmul": backends.cuda.matmul.fp32_precision == "tf32",
        "tf32_conv": backends.cudnn.conv.fp32_precision == "tf32",
        "cudnn_benchmark": bool(backends.cudnn.benchmark),
        "cudnn_deterministic": bool(backends.cudnn.deterministic),
        # NVIDIA's libraries honour this over any framework setting ("0": no TF32)
        "nvidia_tf32_override": os.environ.get("NVIDIA_TF32_OVERRIDE"),
        "native": {
            "cuda.matmul.fp32_precision": backends.cuda.matmul.fp32_precision,
            "cudnn.conv.fp32_precision": backends.cudnn.conv.fp32_precision,
            "mkldnn.matmul.fp32_precision": backends.mkldnn.matmul.fp32_precision,
        },
    }


class CudaStepTimer(StepTimer):
    """Per-step times from CUDA events on the current stream: marks never wait for the GPU.

    Events are created before the window (creating one is not free); `step_times`
    reads them after the window's single synchronisation.
    """

    clock = "cuda_events"

    def __init__(self, steps: int) -> None:
        super().__init__()
        self._events = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
        self._used = 0

    def mark(self) -> None:
        self._events[self._used].record()
        self._used += 1

    def step_times(self) -> list[float]:
        used = self._events[: self._used]
        return [a.elapsed_time(b) / 1e3 for a, b in itertools.pairwise(used)]


class TorchAdapter(EngineAdapter):
    """The torch half shared by DDP and Horovod: model, optimizer, step, evaluation."""

    module: torch.nn.Module  # the unwrapped model
    model: torch.nn.Module  # what the training step calls (wrapped for DDP)
    optimizer: torch.optim.Optimizer

    @property
    def device(self) -> torch.device:
        if self.spec.device is Device.CUDA:
            return torch.device("cuda", self.local_rank)
        return torch.device("cpu")

    def _setup_device(self) -> None:
        if self.spec.device is Device.CUDA:
            if not torch.cuda.is_available():
                raise SpecError("device=cuda but torch sees no CUDA GPU; use --device cpu")
            torch.cuda.set_device(self.local_rank)
        torch.set_num_threads(self.spec.threads)
        _set_fp32_maths(self.spec.allow_tf32)
        # Mixed precision: autocast to the spec's dtype; fp16 also scales the loss
        # (torch's default GradScaler settings, which Paddle's runner copies).
        self._amp_dtype = AMP_DTYPES.get(self.spec.precision)
        self._scaler = torch.amp.GradScaler(
            self.device.type, enabled=self.spec.precision is Precision.FP16, **LOSS_SCALER
        )

    def _make_optimizer(self, params: Any) -> torch.optim.Optimizer:
        s = self.spec
        if s.optimizer is Optimizer.SGD:
            return torch.optim.SGD(
                params, lr=s.lr, momentum=s.momentum, weight_decay=s.weight_decay
            )
        return torch.optim.Adam(params, lr=s.lr, weight_decay=s.weight_decay)

    def _build_module(
        self, model: ModelDef, weights: Weights, input_shape: Shape, classes: int
    ) -> None:
        module = model.torch(
            input_shape, classes, bn_momentum=self.spec.bn_momentum, bn_eps=self.spec.bn_eps
        )
        state = {k: torch.from_numpy(v.copy()) for k, v in weights.items()}
        # torch's BatchNorm step counter is not part of the shared weights
        for key, value in module.state_dict().items():
            if key.endswith("num_batches_tracked"):
                state[key] = torch.zeros_like(value)
        module.load_state_dict(state, strict=True)
        self.module = module.to(self.device)
        self._buffers = [
            b for n, b in self.module.named_buffers() if not n.endswith("num_batches_tracked")
        ]

    def compression_knobs(self) -> dict[str, Any]:
        if self.spec.grad_compression is GradCompression.FP16:
            return {"gradient_compression_ops": FP16_COMPRESSION}
        return {}

    def to_batch(self, x: np.ndarray, y: np.ndarray) -> Any:
        return (
            torch.from_numpy(x).to(self.device, non_blocking=True),
            torch.from_numpy(y).to(self.device, non_blocking=True),
        )

    def amp_knobs(self) -> dict[str, Any]:
        scaler = self._scaler
        return {
            "math": fp32_maths(),
            "autocast_dtype": str(self._amp_dtype).replace("torch.", "")
            if self._amp_dtype
            else None,
            "loss_scaling": scaler.is_enabled(),
            **({"loss_scaler": LOSS_SCALER} if scaler.is_enabled() else {}),
        }

    def _forward_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self._amp_dtype is None:  # fp32: no autocast context at all, as a plain loop
            return _loss(self.model(x), y)
        with torch.autocast(self.device.type, dtype=self._amp_dtype):
            return _loss(self.model(x), y)

    def _apply_step(self) -> None:
        """Optimizer step after backward; Horovod overrides it to reduce before unscaling."""
        self._scaler.step(self.optimizer)
        self._scaler.update()

    def train_step(self, batch: Any, lr: float) -> Any:
        x, y = batch
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad()
        loss = self._forward_loss(x, y)
        self._phase("forward")
        self._scaler.scale(loss).backward()
        self._phase("backward")
        self._apply_step()
        self._phase("optimizer")
        return loss.detach()

    def local_step(self, batch: Any) -> None:
        # autograd.grad fills no .grad: no AccumulateGrad node runs, so neither DDP's
        # reducer nor Horovod's hooks (both on those nodes) start a collective
        x, y = batch
        with self._no_sync():
            loss = self._forward_loss(x, y)
            torch.autograd.grad(loss, [p for p in self.module.parameters() if p.requires_grad])

    def _no_sync(self) -> contextlib.AbstractContextManager[Any]:
        """A context in which the wrapped model's forward prepares no gradient sync."""
        return contextlib.nullcontext()

    def loss_value(self, loss: Any) -> float:
        return float(loss.item())

    @torch.no_grad()
    def evaluate(self, x: np.ndarray, y: np.ndarray) -> tuple[float, int, int]:
        self.module.eval()
        loss_sum, correct, count = 0.0, 0, 0
        for i in self.eval_batches(len(y)):
            xt, yt = self.to_batch(x[i], y[i])
            logits = self.module(xt)
            loss_sum += float(_loss(logits, yt, reduction="sum").item())
            correct += int((logits.argmax(-1) == yt).sum().item())
            count += int(yt.numel())
        self.module.train()
        return loss_sum, correct, count

    def state(self) -> Weights:
        return {
            k: v.detach().cpu().numpy().copy()
            for k, v in self.module.state_dict().items()
            if not k.endswith("num_batches_tracked")
        }

    def save_native(self, stem: str) -> str:
        path = stem + ".pt"
        torch.save(self.module.state_dict(), path)
        return path

    def synchronize(self) -> None:
        if self.spec.device is Device.CUDA:
            torch.cuda.synchronize(self.device)

    def step_timer(self, steps: int) -> StepTimer:
        if self.spec.device is Device.CUDA:
            return CudaStepTimer(steps)
        return StepTimer()

    def peak_device_memory_mb(self) -> float | None:
        if self.spec.device is Device.CUDA:
            return float(torch.cuda.max_memory_allocated(self.device)) / 2**20
        return None

    def optimizer_state_tensors(self) -> int:
        return sum(
            1 for st in self.optimizer.state.values() for v in st.values() if torch.is_tensor(v)
        )

    def device_memory_mb(self) -> float | None:
        if self.spec.device is Device.CUDA:
            return float(torch.cuda.memory_allocated(self.device)) / 2**20
        return None

    def reset_peak_device_memory(self) -> None:
        if self.spec.device is Device.CUDA:
            torch.cuda.reset_peak_memory_stats(self.device)

    def buffer(self, nbytes: int) -> Any:
        return torch.ones(nbytes // 4, dtype=torch.float32, device=self.device)

    def _tensor(self, arr: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(arr)).to(self.device)

    def tracer(self, folder: Path, keep: bool) -> Tracer:
        path = str(folder / f"torch-trace.rank{self.rank}.json") if keep else None
        return TorchTracer(path, self.spec.device is Device.CUDA)

    def threads(self) -> dict[str, Any]:
        return {
            "torch_intra_op": torch.get_num_threads(),
            "torch_inter_op": torch.get_num_interop_threads(),
            **{v: os.environ.get(v) for v in machine.THREAD_VARS},
        }


class TorchTracer(Tracer):
    """torch.profiler over the traced steps, on a rank that keeps a trace (`path`): one
    Chrome-trace JSON, with `record_function` ranges for the phases; the CPU's operators,
    and on a GPU its kernels too."""

    tool = "torch.profiler"

    def __init__(self, path: str | None, cuda: bool) -> None:
        self.path = path
        activities = [torch.profiler.ProfilerActivity.CPU]
        if cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._prof = None if path is None else torch.profiler.profile(activities=activities)

    def start(self) -> None:
        if self._prof is not None:
            self._prof.start()

    def span(self, name: str) -> Any:
        if self._prof is None:
            return super().span(name)
        scope = torch.profiler.record_function(name)
        scope.__enter__()
        return functools.partial(scope.__exit__, None, None, None)

    def stop(self) -> list[Trace]:
        if self._prof is None or self.path is None:
            return []
        self._prof.stop()
        self._prof.export_chrome_trace(self.path)
        return [{"path": self.path, "format": "chrome-json", "tool": self.tool}]
