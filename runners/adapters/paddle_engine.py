"""PaddlePaddle DataParallel adapter.

Paddle stores Linear weights as [in, out] where torch (the canonical layout)
uses [out, in]; loading and reading weights transposes exactly those tensors,
so the fingerprint of the loaded model equals the torch engines' bit for bit.
"""

from __future__ import annotations

import contextlib
import gc
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np

with warnings.catch_warnings():
    # paddle warns on import when ccache is absent; irrelevant to running models.
    warnings.simplefilter("ignore", UserWarning)
    import paddle
    import paddle.distributed as dist
    import paddle.nn.functional as F
    import paddle.profiler

from bench.contract.spec import BNBuffers, Device, Optimizer, Precision
from bench.core import machine
from bench.core.errors import SpecError
from bench.engines import Engine
from bench.records.types import Trace
from models.base import ModelDef, Shape, Weights
from runners.adapters.base import LOSS_SCALER, CommProbe, EngineAdapter, Tracer


def _loss(logits: Any, y: Any, reduction: Literal["mean", "sum"] = "mean") -> Any:
    """Cross-entropy over every prediction: one per sample, or one per token for an LM."""
    if logits.ndim > 2:  # an LM's tokens; a classifier's [batch, classes] is left alone:
        # each reshape is a dispatched op in Paddle's eager mode, paid every step
        logits, y = logits.reshape([-1, logits.shape[-1]]), y.reshape([-1])
    return F.cross_entropy(logits, y, reduction=reduction)


class _InsideBackward(CommProbe):
    # Paddle records no event for its Gloo allreduce, and DataParallel runs it
    # synchronously inside backward: none of it overlaps compute.
    source = "not hookable: synchronous inside backward on Gloo, so all of it is exposed"


class _PaddleTracer(Tracer):
    """paddle.profiler over the traced steps: its Chrome-trace JSON at `path`, with a
    `RecordEvent` range per phase (Paddle's export appends each event's duration to its
    name: "forward[1.234 ms]"); CPU events, and on a GPU its kernels too."""

    tool = "paddle.profiler"

    def __init__(self, path: str, gpu: bool) -> None:
        self.path = path
        targets = [paddle.profiler.ProfilerTarget.CPU]
        if gpu:
            targets.append(paddle.profiler.ProfilerTarget.GPU)
        # stop() hands the result to on_trace_ready: written where the record says
        self._prof = paddle.profiler.Profiler(
            targets=targets, on_trace_ready=lambda prof: prof.export(path, "json")
        )

    def start(self) -> None:
        self._prof.start()

    def span(self, name: str) -> Callable[[], None]:
        event = paddle.profiler.RecordEvent(name)
        event.begin()
        return event.end

    def stop(self) -> list[Trace]:
        self._prof.stop()
        return [{"path": self.path, "format": "chrome-json", "tool": self.tool}]


class PaddleAdapter(EngineAdapter):
    engine = Engine.PADDLE

    layer: Any  # the unwrapped paddle.nn.Layer
    model: Any  # DataParallel wrapper (or the layer itself at world size 1)
    optimizer: Any

    def init(self) -> None:
        if self.spec.device is Device.CUDA:
            if not paddle.is_compiled_with_cuda():
                raise SpecError("device=cuda but this paddle is a CPU build; use --device cpu")
            paddle.set_device(f"gpu:{dist.ParallelEnv().device_id}")
        else:
            paddle.set_device("cpu")
        self._set_fp32_maths()
        # Mixed precision: O1 autocast, and for fp16 a loss scaler set like torch's.
        self._amp_dtype: Any = {Precision.FP16: "float16", Precision.BF16: "bfloat16"}.get(
            self.spec.precision
        )
        self._scaler = paddle.amp.GradScaler(
            enable=self.spec.precision is Precision.FP16,
            init_loss_scaling=LOSS_SCALER["init_scale"],
            incr_ratio=LOSS_SCALER["growth_factor"],
            decr_ratio=LOSS_SCALER["backoff_factor"],
            incr_every_n_steps=LOSS_SCALER["growth_interval"],
            decr_every_n_nan_or_inf=1,  # torch backs off at the first inf step
        )
        # Paddle's launcher only: under another (mpirun) there is no Paddle group to
        # join, and the protocol refuses the world of one this starts
        self._parallel = int(os.environ.get("PADDLE_TRAINERS_NUM", "1")) > 1
        if self._parallel:
            dist.init_parallel_env()
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.local_rank = int(os.environ.get("PADDLE_LOCAL_RANK", self.rank))
        self.local_world_size = int(os.environ.get("PADDLE_LOCAL_SIZE", self.world_size))

    def _forward_loss(self, x: Any, y: Any) -> Any:
        if self._amp_dtype is None:  # fp32: no autocast context at all, as a plain loop
            return _loss(self.model(x), y)
        with paddle.amp.auto_cast(level="O1", dtype=self._amp_dtype):
            return _loss(self.model(x), y)

    def local_step(self, batch: Any) -> None:
        # paddle.grad fills no .grad, and no_sync keeps DataParallel's reducer out of it
        x, y = batch
        wrapped = isinstance(self.model, paddle.DataParallel)  # a twin trains unwrapped
        with self.model.no_sync() if wrapped else contextlib.nullcontext():
            loss = self._forward_loss(x, y)
            paddle.grad([loss], [p for p in self.layer.parameters() if not p.stop_gradient])

    def shutdown(self) -> None:
        """Release the DataParallel wrapper (its reducer holds the Gloo group), then leave
        the group, then collect: Gloo's threads end here, not in interpreter finalisation."""
        if self._parallel:
            if hasattr(self, "layer"):  # built (a refused world leaves before building)
                self.model = self.layer
            gc.collect()
            if dist.is_initialized():
                dist.destroy_process_group()
            gc.collect()

    # paddle's names for BatchNorm running statistics vs the canonical (torch) ones
    _BN_NAMES = (("running_mean", "_mean"), ("running_var", "_variance"))

    @classmethod
    def _rename(cls, key: str, to_paddle: bool) -> str:
        for canonical, own in cls._BN_NAMES:
            old, new = (canonical, own) if to_paddle else (own, canonical)
            if key.endswith("." + old):
                return key[: -len(old)] + new
        return key

    def _linear_weights(self) -> set[str]:
        return {
            f"{name}.weight"
            for name, sub in self.layer.named_sublayers()
            if isinstance(sub, paddle.nn.Linear)
        }

    def build(self, model: ModelDef, weights: Weights, input_shape: Shape, classes: int) -> None:
        s = self.spec
        self.layer = model.paddle(input_shape, classes, bn_momentum=s.bn_momentum, bn_eps=s.bn_eps)
        transposed = self._linear_weights()
        state = {
            self._rename(k, to_paddle=True): (v.T.copy() if k in transposed else v)
            for k, v in weights.items()
        }
        own = set(self.layer.state_dict())
        if own != set(state):
            raise RuntimeError(
                f"paddle model parameters {sorted(own)} != shared weights {sorted(state)}"
            )
        self.layer.set_state_dict({k: paddle.to_tensor(v) for k, v in state.items()})
        if s.bn_buffers is BNBuffers.SYNC and self._parallel and s.grad_sync:
            self.layer = paddle.nn.SyncBatchNorm.convert_sync_batchnorm(self.layer)
        # DataParallel broadcasts rank 0's parameters at construction; at world
        # size 1 paddle's wrapper is a pass-through.
        self.model = (
            paddle.DataParallel(self.layer, comm_buffer_size=int(s.bucket_mb))
            if self._parallel and s.grad_sync
            else self.layer
        )
        params = self.model.parameters()
        if s.optimizer is Optimizer.SGD:
            # Momentum with mu=0 is plain SGD; weight_decay as a float is coupled L2,
            # as torch.optim.SGD's weight_decay is.
            self.optimizer = paddle.optimizer.Momentum(
                learning_rate=s.lr,
                momentum=s.momentum,
                parameters=params,
                weight_decay=s.weight_decay or None,
            )
        else:
            self.optimizer = paddle.optimizer.Adam(
                learning_rate=s.lr, parameters=params, weight_decay=s.weight_decay or None
            )
        self._lr = s.lr

    def _set_fp32_maths(self) -> None:
        """fp32 maths as torch's adapters set it (see torch_base._set_fp32_maths).

        Paddle defaults to TF32 for cuBLAS matmuls and cuDNN convolutions alike; its
        switches and cuDNN flags exist only in CUDA builds (a CPU build has no TF32).
        """
        if not paddle.is_compiled_with_cuda():
            return
        core = paddle.base.core
        core.set_cublas_switch(self.spec.allow_tf32)
        core.set_cudnn_switch(self.spec.allow_tf32)
        paddle.set_flags(
            {"FLAGS_cudnn_deterministic": False, "FLAGS_cudnn_exhaustive_search": False}
        )

    def _fp32_maths(self) -> dict[str, Any]:
        """How fp32 maths ran, read back from paddle, in the keys torch's adapters record."""
        override = os.environ.get("NVIDIA_TF32_OVERRIDE")
        if not paddle.is_compiled_with_cuda():
            return {
                "tf32_matmul": False,
                "tf32_conv": False,
                "cudnn_benchmark": False,
                "cudnn_deterministic": False,
                "nvidia_tf32_override": override,
                "native": "CPU build: no cuBLAS or cuDNN",
            }
        core = paddle.base.core
        flags = paddle.get_flags(["FLAGS_cudnn_deterministic", "FLAGS_cudnn_exhaustive_search"])
        return {
            "tf32_matmul": bool(core.get_cublas_switch()),
            "tf32_conv": bool(core.get_cudnn_switch()),
            "cudnn_benchmark": bool(flags["FLAGS_cudnn_exhaustive_search"]),
            "cudnn_deterministic": bool(flags["FLAGS_cudnn_deterministic"]),
            "nvidia_tf32_override": override,
            "native": flags,
        }

    def to_batch(self, x: np.ndarray, y: np.ndarray) -> Any:
        return paddle.to_tensor(x), paddle.to_tensor(y)

    def train_step(self, batch: Any, lr: float) -> Any:
        x, y = batch
        if self.spec.bn_buffers is BNBuffers.BROADCAST and self._parallel:
            # what DDP's broadcast_buffers does, done with paddle's collective
            for buf in self.layer.buffers():
                dist.broadcast(buf, src=0)
            self._phase("buffers")  # a collective: kept out of the forward's own work
        if lr != self._lr:  # set_lr runs a fill op on the LR tensor: only when it changes
            self.optimizer.set_lr(lr)
            self._lr = lr
        loss = self._forward_loss(x, y)
        self._phase("forward")
        if self._scaler.is_enable():
            # DataParallel has averaged the gradients by the end of backward, so every
            # rank unscales (and checks for inf) the same values.
            self._scaler.scale(loss).backward()
            self._phase("backward")
            self._scaler.step(self.optimizer)
            self._scaler.update()
        else:
            loss.backward()
            self._phase("backward")
            self.optimizer.step()
        self.optimizer.clear_grad()
        self._phase("optimizer")
        return loss

    def comm_probe(self) -> CommProbe:
        return (
            _InsideBackward() if self._parallel and self.spec.device is Device.CPU else CommProbe()
        )

    def tracer(self, folder: Path, keep: bool) -> Tracer:
        if not keep:
            return Tracer()
        return _PaddleTracer(
            str(folder / f"paddle-trace.rank{self.rank}.json"), self.spec.device is Device.CUDA
        )

    def loss_value(self, loss: Any) -> float:
        return float(loss.item())

    def evaluate(self, x: np.ndarray, y: np.ndarray) -> tuple[float, int, int]:
        self.layer.eval()
        loss_sum, correct, count = 0.0, 0, 0
        with paddle.no_grad():
            for i in self.eval_batches(len(y)):
                xt, yt = self.to_batch(x[i], y[i])
                logits = self.layer(xt)
                loss_sum += float(_loss(logits, yt, reduction="sum").numpy())
                correct += int((logits.argmax(-1) == yt).astype("int64").sum().item())
                count += int(yt.size)
        self.layer.train()
        return loss_sum, correct, count

    def state(self) -> Weights:
        transposed = self._linear_weights()
        return {
            self._rename(k, to_paddle=False): (
                v.numpy().T.copy() if k in transposed else v.numpy().copy()
            )
            for k, v in self.layer.state_dict().items()
        }

    def save_native(self, stem: str) -> str:
        path = stem + ".pdparams"
        paddle.save(self.layer.state_dict(), path)
        return path

    def allreduce_sum(self, arr: np.ndarray) -> np.ndarray:
        if not self._parallel:
            return arr.copy()
        t = paddle.to_tensor(np.ascontiguousarray(arr))
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return np.asarray(t.numpy())

    def allgather(self, arr: np.ndarray) -> np.ndarray:
        if not self._parallel:
            return arr[None].copy()
        out: list[Any] = []
        dist.all_gather(out, paddle.to_tensor(np.ascontiguousarray(arr)))
        return np.stack([t.numpy() for t in out])

    def barrier(self) -> None:
        if self._parallel:
            dist.barrier()

    def buffer(self, nbytes: int) -> Any:
        return paddle.ones([nbytes // 4], dtype="float32")

    def allreduce_inplace(self, buf: Any) -> None:
        if self._parallel:
            dist.all_reduce(buf, op=dist.ReduceOp.SUM)

    def synchronize(self) -> None:
        if self.spec.device is Device.CUDA:
            paddle.device.cuda.synchronize()

    def peak_device_memory_mb(self) -> float | None:
        if self.spec.device is Device.CUDA:
            return float(paddle.device.cuda.max_memory_allocated()) / 2**20
        return None

    def device_memory_mb(self) -> float | None:
        if self.spec.device is Device.CUDA:
            return float(paddle.device.cuda.memory_allocated()) / 2**20
        return None

    def reset_peak_device_memory(self) -> None:
        if self.spec.device is Device.CUDA:
            paddle.device.cuda.reset_max_memory_allocated()

    def optimizer_state_tensors(self) -> int:
        # paddle creates its accumulators (velocity, moments) lazily, at the first step
        return sum(len(acc) for acc in self.optimizer._accumulators.values())

    def versions(self) -> dict[str, Any]:
        return {
            "paddle": paddle.__version__,
            "paddle_commit": paddle.version.commit,
            "cuda": paddle.version.cuda(),
            "backend": "nccl" if self.spec.device is Device.CUDA else "gloo",
        }

    def knobs(self) -> dict[str, Any]:
        return {
            "comm_buffer_size_mb": self.spec.bucket_mb,
            "last_comm_buffer_size_mb": 1,
            "data_parallel_wrapper": self._parallel and self.spec.grad_sync,
            "grad_sync": self.spec.grad_sync,
            "bn_buffers": self.spec.bn_buffers.value,
            "gradient_compression": "none",
            "math": self._fp32_maths(),
            "autocast_dtype": self._amp_dtype,
            "loss_scaling": self._scaler.is_enable(),
            **({"loss_scaler": LOSS_SCALER} if self._scaler.is_enable() else {}),
        }

    def threads(self) -> dict[str, Any]:
        return {v: os.environ.get(v) for v in machine.THREAD_VARS}
