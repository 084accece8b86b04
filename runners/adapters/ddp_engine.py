"""PyTorch DistributedDataParallel: started by torchrun, gradients averaged by DDP's reducer.

Its communication probe wraps DDP's own communication hook (`_TimedHook`), so the
profiled steps time each bucket's allreduce as DDP runs it.
"""

from __future__ import annotations

import datetime
import functools
import gc
import inspect
import os
import socket
import time
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from bench.contract.spec import BNBuffers, Device, GradCompression
from bench.engines import Engine
from models.base import ModelDef, Shape, Weights
from runners.adapters.base import CommProbe, union_seconds
from runners.adapters.torch_base import TorchAdapter


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _buffer_sync(every_forward: bool) -> dict[str, Any]:
    """DDP's switch for re-broadcasting buffers each forward, under this torch's name for it.

    torch 2.13 renamed `broadcast_buffers` to `forward_sync_buffers` (both still sync
    once at construction); older releases only know the first.
    """
    params = inspect.signature(DDP.__init__).parameters
    key = "forward_sync_buffers" if "forward_sync_buffers" in params else "broadcast_buffers"
    return {key: every_forward}


class _TimedHook:
    """A DDP communication hook around `inner` (`hook`) that, while `on`, records each
    bucket's collective from the bucket being ready to its future completing. On CPU
    (Gloo) the future completes with the collective, and the host clock times it; on a
    GPU it completes when the collective is queued, so CUDA events are recorded instead,
    the end one on the stream the completion callback runs on (which waits for the
    collective), and read once the profiled steps are synchronised."""

    def __init__(self, inner: Any) -> None:
        self.on = False
        self.spans: list[tuple[Any, Any]] = []

        # DDP checks a hook's name and annotations: they are `inner`'s (functools.wraps)
        @functools.wraps(inner)
        def hook(state: Any, bucket: Any) -> Any:
            if not self.on:
                return inner(state, bucket)
            cuda = bucket.buffer().is_cuda
            t0 = _mark(cuda)

            def done(fut: Any) -> Any:
                self.spans.append((t0, _mark(cuda)))
                return fut.value()

            return inner(state, bucket).then(done)

        self.hook = hook


def _mark(cuda: bool) -> Any:
    """Now: the host clock, or a CUDA event recorded on the current stream."""
    if not cuda:
        return time.perf_counter()
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event


class _HookProbe(CommProbe):
    source = "DDP communication hook: each bucket's allreduce, from ready to done"

    def __init__(self, hook: _TimedHook) -> None:
        self.hook = hook
        hook.spans.clear()
        hook.on = True

    def stop(self) -> float | None:
        self.hook.on = False
        spans = self.hook.spans
        if spans and not isinstance(spans[0][0], float):  # CUDA events, synchronised by now
            base = spans[0][0]
            spans = [(base.elapsed_time(a) / 1e3, base.elapsed_time(b) / 1e3) for a, b in spans]
        return union_seconds(spans)


class DDPAdapter(TorchAdapter):
    engine = Engine.DDP
    _timed_hook: _TimedHook | None = None

    def init(self) -> None:
        backend = "nccl" if self.spec.device is Device.CUDA else "gloo"
        timeout = datetime.timedelta(seconds=self.timeout_s)
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", self.expected_world_size()))
        self._setup_device()
        if "RANK" in os.environ:
            dist.init_process_group(backend, timeout=timeout)
        else:  # run directly with python: a one-process group, so the same code path runs
            dist.init_process_group(
                backend,
                init_method=f"tcp://127.0.0.1:{_free_port()}",
                rank=0,
                world_size=1,
                timeout=timeout,
            )
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()

    def _no_sync(self) -> Any:
        # DDP's forward otherwise expects the backward that finishes its reduction
        return self.model.no_sync() if isinstance(self.model, DDP) else super()._no_sync()

    def build(self, model: ModelDef, weights: Weights, input_shape: Shape, classes: int) -> None:
        self._build_module(model, weights, input_shape, classes)
        if self.spec.bn_buffers is BNBuffers.SYNC and self.spec.grad_sync:
            self.module = torch.nn.SyncBatchNorm.convert_sync_batchnorm(self.module)
        ids = [self.local_rank] if self.spec.device is Device.CUDA else None
        # DDP broadcasts rank 0's parameters and buffers in its constructor, and by
        # default re-broadcasts buffers every forward (recorded in knobs()).
        self.model = self.module
        if self.spec.grad_sync:
            ddp = DDP(
                self.module,
                device_ids=ids,
                bucket_cap_mb=self.spec.bucket_mb,
                **_buffer_sync(self.spec.bn_buffers is BNBuffers.BROADCAST),
            )
            if self.spec.grad_compression is GradCompression.FP16:
                # DDP takes one hook per model: the timing wrapper, off until profiled
                self._timed_hook = _TimedHook(default_hooks.fp16_compress_hook)
                ddp.register_comm_hook(None, self._timed_hook.hook)
            self.model = ddp
        self.optimizer = self._make_optimizer(self.model.parameters())

    def comm_probe(self) -> CommProbe:
        if not isinstance(self.model, DDP):
            return CommProbe()
        if self._timed_hook is None:
            # Only for the profiled steps, which follow every timed one: the timed steps
            # ran DDP's built-in allreduce, this is the same averaging as a Python hook.
            self._timed_hook = _TimedHook(default_hooks.allreduce_hook)
            self.model.register_comm_hook(None, self._timed_hook.hook)
        return _HookProbe(self._timed_hook)

    def allreduce_sum(self, arr: np.ndarray) -> np.ndarray:
        t = self._tensor(arr)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t.cpu().numpy()

    def allgather(self, arr: np.ndarray) -> np.ndarray:
        t = self._tensor(arr)
        out = [torch.empty_like(t) for _ in range(self.world_size)]
        dist.all_gather(out, t)
        return torch.stack(out).cpu().numpy()

    def barrier(self) -> None:
        dist.barrier()

    def allreduce_inplace(self, buf: Any) -> None:
        dist.all_reduce(buf, op=dist.ReduceOp.SUM)

    def versions(self) -> dict[str, Any]:
        return {
            "torch": torch.__version__,
            "backend": dist.get_backend(),
            "cuda": torch.version.cuda,
        }

    def knobs(self) -> dict[str, Any]:
        return {
            "bucket_cap_mb": self.spec.bucket_mb,
            "broadcast_buffers": self.spec.bn_buffers is BNBuffers.BROADCAST,
            "gradient_as_bucket_view": False,
            "find_unused_parameters": False,
            "gradient_compression": self.spec.grad_compression.value,
            **self.compression_knobs(),
            "grad_sync": self.spec.grad_sync,
            **self.amp_knobs(),
        }

    def shutdown(self) -> None:
        """Leave in this order, while the interpreter is fully alive: release the DDP
        wrapper (its reducer holds the process group and the comm hook, whose callbacks
        run on Gloo's threads), destroy the process group, then collect. With torch 2.13
        Gloo's threads still outlive this once a DDP wrapper was built (see
        tests/probes/gloo_threads.py); a death at exit keeps the run's record."""
        if hasattr(self, "module"):  # built (a refused world leaves before building)
            self.model = self.module
        gc.collect()
        if dist.is_initialized():
            dist.destroy_process_group()
        gc.collect()
