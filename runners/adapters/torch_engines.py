"""PyTorch DistributedDataParallel and Horovod (PyTorch backend) adapters.

Both train the very same torch module; they differ only in how the process
group starts, how gradients are averaged and which collectives the protocol
uses. Keeping the shared torch half in one base class is what makes their loss
trajectories comparable to float rounding.
"""

from __future__ import annotations

import datetime
import functools
import gc
import inspect
import itertools
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
import torch.profiler
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from bench import engines
from bench.contract.spec import BNBuffers, Device, GradCompression, Optimizer, Precision, RunSpec
from bench.core import machine
from bench.core.errors import InputError, SpecError
from bench.engines import Engine
from bench.engines import horovod as horovod_entry
from bench.measure import timeline
from bench.records.types import Trace
from models.base import ModelDef, Shape, Weights
from runners.adapters.base import (
    LOSS_SCALER,
    CommProbe,
    EngineAdapter,
    StepTimer,
    Tracer,
    union_seconds,
)


def _swap_batchnorm(module: torch.nn.Module, make: Any) -> None:
    """Replace every BatchNorm in `module` by make(bn), carrying its weights and statistics."""
    for name, child in module.named_children():
        if isinstance(child, torch.nn.modules.batchnorm._BatchNorm):
            new = make(child)
            new.load_state_dict(child.state_dict())
            setattr(module, name, new)
        else:
            _swap_batchnorm(child, make)


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


class _PrescaledFP16:
    """Horovod compressor doing exactly what DDP's fp16_compress_hook does.

    Cast to fp16, divide by the world size in fp16, then (with op=Sum) sum in fp16 and
    cast back. Horovod's own Compression.fp16 with op=Average sums first and divides
    afterwards, so under loss scaling its sum overflows where DDP's does not.
    """

    def __init__(self, size: int) -> None:
        self.size = size

    def compress(self, tensor: torch.Tensor) -> tuple[torch.Tensor, torch.dtype | None]:
        if not tensor.dtype.is_floating_point:
            return tensor, None
        return tensor.to(torch.float16).div_(self.size), tensor.dtype

    def decompress(self, tensor: torch.Tensor, ctx: torch.dtype | None) -> torch.Tensor:
        return tensor if ctx is None else tensor.to(ctx)


# Recorded for every engine that compresses: the order of operations of the fp16 allreduce.
FP16_COMPRESSION = "cast to fp16, divide by world size, sum in fp16, cast back"


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
        return _TorchTracer(path, self.spec.device is Device.CUDA)

    def threads(self) -> dict[str, Any]:
        return {
            "torch_intra_op": torch.get_num_threads(),
            "torch_inter_op": torch.get_num_interop_threads(),
            **{v: os.environ.get(v) for v in machine.THREAD_VARS},
        }


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


class _TimelineProbe(CommProbe):
    source = "Horovod timeline on rank 0: its ALLREDUCE activities (fusion copies included)"

    def __init__(self, hvd: Any, rank: int) -> None:
        self.hvd, self.rank = hvd, rank
        self.folder = tempfile.mkdtemp(prefix="bench-timeline-")
        self.path = os.path.join(self.folder, "timeline.json")
        hvd.start_timeline(self.path, mark_cycles=False)
        hvd.barrier()  # the background thread takes the start at its next cycle

    def stop(self) -> float | None:
        self.hvd.barrier()  # every profiled collective is done before the stop
        self.hvd.stop_timeline()  # flushes and closes the file (rank 0 writes it)
        try:
            return None if self.rank != 0 else union_seconds(timeline.spans(self.path))
        except (OSError, ValueError):
            return None
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)


# Horovod's timeline as the record names it (bench/records/types.py Trace)
HOROVOD_TIMELINE = "horovod timeline"


class _TorchTracer(Tracer):
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


class _HorovodTracer(_TorchTracer):
    """torch.profiler's trace and, where the dynamic timeline is armed (comm_timeline=true),
    Horovod's timeline of the same steps: Horovod's collectives run on its own C++ thread,
    which torch's profiler does not see. The timeline starts and stops on every rank, as
    the communication probe's does, and rank 0 writes it."""

    def __init__(
        self, path: str | None, cuda: bool, hvd: Any, rank: int, timeline_path: str | None
    ) -> None:
        super().__init__(path, cuda)
        self.hvd, self.rank, self.timeline_path = hvd, rank, timeline_path

    def start(self) -> None:
        if self.timeline_path is not None:  # the collective part first, on every rank
            self.hvd.start_timeline(self.timeline_path, mark_cycles=False)
            self.hvd.barrier()  # the background thread takes the start at its next cycle
        super().start()

    def stop(self) -> list[Trace]:
        if self.timeline_path is None:
            return super().stop()
        self.hvd.barrier()  # every traced collective is done before the stop
        self.hvd.stop_timeline()  # flushes and closes the file
        kept: list[Trace] = []
        if self.rank == 0:
            kept = [{"path": self.timeline_path, "format": "chrome-json-array",
                     "tool": HOROVOD_TIMELINE, "ranks": [0]}]  # fmt: skip
        return super().stop() + kept


class DDPAdapter(TorchAdapter):
    engine = Engine.DDP
    _timed_hook: _TimedHook | None = None

    def expected_world_size(self) -> int:
        return int(os.environ.get("WORLD_SIZE", "1"))

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
        self.model = self.module
        gc.collect()
        if dist.is_initialized():
            dist.destroy_process_group()
        gc.collect()


def _flag(options: dict[str, str], name: str) -> bool:
    value = options.get(name, "false").lower()
    if value not in ("true", "false"):
        raise SpecError(f"engine option {name} must be true or false, got {value!r}")
    return value == "true"


class HorovodAdapter(TorchAdapter):
    engine = Engine.HOROVOD

    def __init__(
        self, spec: RunSpec, timeout_s: float = 300.0, options: dict[str, str] | None = None
    ) -> None:
        super().__init__(spec, timeout_s, options)
        self.autotune = _flag(self.options, "autotune")
        self.adasum = _flag(self.options, "adasum")
        self.controller = horovod_entry.controller(self.options)

    def expected_world_size(self) -> int:
        # horovodrun --gloo sets HOROVOD_SIZE; under --mpi only mpirun's own variables
        # say it (OpenMPI's, else the PMI ones of MPICH and Slurm); started by
        # `srun --mpi=pmix`, only Slurm's step size.
        for var in ("HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"):
            if var in os.environ:
                return int(os.environ[var])
        return 1

    def _adopt_launcher_settings(self) -> None:
        """Read back what horovodrun's own flags put in this worker's environment.

        `horovodrun --fusion-threshold-mb/--cycle-time-ms/--timeline-filename/--autotune`
        reach the worker only as HOROVOD_* variables. A fusion threshold other than the
        spec's bucket_mb is refused (the spec sets every engine's bucket, and the record
        would otherwise state a size that did not apply); the others are honoured as if
        given with --engine-option, so they are recorded and keep the run a variant of
        its own in `bench compare`. A value given both ways must agree.
        """
        env = os.environ
        ours = int(self.spec.bucket_mb * 1024 * 1024)
        fusion = env.get("HOROVOD_FUSION_THRESHOLD")
        if fusion is not None:
            try:
                theirs = int(float(fusion))
            except ValueError:
                raise InputError(f"HOROVOD_FUSION_THRESHOLD={fusion!r} is not a number") from None
            if theirs != ours:
                raise InputError(
                    f"HOROVOD_FUSION_THRESHOLD={fusion} ({theirs / 2**20:g} MB, from horovodrun "
                    f"--fusion-threshold-mb or the environment) contradicts the spec's "
                    f"bucket_mb={self.spec.bucket_mb:g}; pass --bucket-mb instead, which sets "
                    "every engine's bucket"
                )
            self.from_launcher.append("HOROVOD_FUSION_THRESHOLD")
        for var, option in (
            ("HOROVOD_CYCLE_TIME", "cycle_time_ms"),
            ("HOROVOD_TIMELINE", "timeline"),
        ):
            value = env.get(var)
            if value is None:
                continue
            given = self.options.get(option)
            same = given == value
            if option == "cycle_time_ms" and given is not None:
                try:
                    same = float(given) == float(value)
                except ValueError:
                    same = False
            if given is not None and not same:
                raise InputError(
                    f"{var}={value} (from horovodrun or the environment) contradicts "
                    f"--engine-option {option}={given}; set it one way"
                )
            if given is None:
                self.options[option] = value
                self.from_launcher.append(var)
        if env.get("HOROVOD_AUTOTUNE", "0") not in ("", "0") and not self.autotune:
            self.autotune = True
            self.options["autotune"] = "true"
            self.from_launcher.append("HOROVOD_AUTOTUNE")

    def _set_environment(self) -> None:
        """Horovod reads these when it starts; they must be set before hvd.init()."""
        os.environ["HOROVOD_FUSION_THRESHOLD"] = str(int(self.spec.bucket_mb * 1024 * 1024))
        os.environ.setdefault("HOROVOD_GLOO_TIMEOUT_SECONDS", str(int(self.timeout_s)))
        if "timeline" in self.options:
            os.environ["HOROVOD_TIMELINE"] = self.options["timeline"]
        elif self.profile_comm and _flag(self.options, "comm_timeline"):
            # armed, not recording: the profiled steps start and stop their own timeline.
            # Opt-in: armed, it slowed the timed steps by 21% [8%, 27%] at 2 workers here
            # (tests/benchmarks/profile_cost.py), which profiling must never do.
            os.environ["HOROVOD_TIMELINE"] = "DYNAMIC"
        if "cycle_time_ms" in self.options:
            os.environ["HOROVOD_CYCLE_TIME"] = self.options["cycle_time_ms"]
        if self.autotune:
            os.environ["HOROVOD_AUTOTUNE"] = "1"

    def init(self) -> None:
        self.from_launcher: list[str] = []
        self._adopt_launcher_settings()
        self._set_environment()
        # An MPI build defaults to the MPI controller when nothing says otherwise (a
        # worker run without a launcher): the option decides, so both builds run the same.
        # horovodrun --gloo sets gloo itself; a conflict is a launch that contradicts it.
        started = os.environ.setdefault("HOROVOD_CONTROLLER", self.controller).lower()
        if started == "gloo":
            # An MPI build runs CPU tensor operations over MPI by default, even under the
            # Gloo controller; without MPI_Init (no mpirun) that aborts the process.
            os.environ.setdefault("HOROVOD_CPU_OPERATIONS", "gloo")
        if started != self.controller:
            raise SpecError(
                f"engine option controller={self.controller} but Horovod was started with the "
                f"{started} controller (HOROVOD_CONTROLLER); launch with horovodrun "
                f"--{self.controller}, as bench run does"
            )
        try:
            import horovod.torch as hvd
        except ImportError as exc:  # e.g. Horovod installed without its PyTorch extension
            raise engines.cannot_start(self.engine, exc) from None

        if not hvd.gloo_built() and self.spec.device is Device.CPU:
            raise RuntimeError(
                "this Horovod was built without Gloo, which CPU runs need; rebuild it with "
                "HOROVOD_WITH_GLOO=1 (scripts/setup.sh does)"
            )
        if self.spec.device is Device.CUDA and not hvd.nccl_built():
            # without NCCL every GPU gradient would go through the CPU over Gloo: a
            # different engine from the one this benchmark claims to measure
            raise InputError(
                "device=cuda but this Horovod was built without NCCL; rebuild it with "
                "HOROVOD_GPU_OPERATIONS=NCCL (scripts/gpu_bundle.sh for an offline GPU node)"
            )
        if self.controller == "mpi" and not hvd.mpi_built():
            # Horovod implements Adasum on MPI; a Gloo-only build fails at the first step.
            why = "adasum=true" if self.adasum else "controller=mpi"
            raise SpecError(
                f"engine option {why} needs Horovod built with MPI (HOROVOD_WITH_MPI=1); "
                "this build has Gloo only: install an MPI (apt-get install libopenmpi-dev "
                "openmpi-bin) and rerun scripts/setup.sh"
            )
        hvd.init()
        if self.controller == "mpi" and not hvd.mpi_enabled():
            raise RuntimeError("Horovod was asked for the MPI controller but did not enable MPI")
        self.hvd = hvd
        self.rank, self.world_size, self.local_rank = hvd.rank(), hvd.size(), hvd.local_rank()
        self.local_world_size = hvd.local_size()
        self._setup_device()

    def build(self, model: ModelDef, weights: Weights, input_shape: Shape, classes: int) -> None:
        hvd = self.hvd
        self._build_module(model, weights, input_shape, classes)
        if self.spec.bn_buffers is BNBuffers.SYNC and self.spec.grad_sync:
            _swap_batchnorm(
                self.module,
                lambda bn: hvd.SyncBatchNorm(
                    bn.num_features, bn.eps, bn.momentum, bn.affine, bn.track_running_stats
                ),
            )
            self.module.to(self.device)
        self.model = self.module
        optimizer = self._make_optimizer(self.module.parameters())
        # The canonical Horovod recipe: broadcast rank 0's state, then wrap the optimizer.
        hvd.broadcast_parameters(self.module.state_dict(), root_rank=0)
        # Not for a fresh optimizer: Horovod 0.28.1 initialises its state by zeroing every
        # gradient and calling step(), which with weight decay moves every weight (Adam: by
        # about lr) and seeds the momentum of the unwrapped optimizer, so Horovod would
        # start from other weights than DDP. A fresh optimizer has no state to broadcast,
        # and its weights were just broadcast.
        if optimizer.state_dict()["state"]:
            hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        if not self.spec.grad_sync:
            self.optimizer = optimizer
            return
        compression: Any = hvd.Compression.none
        op = hvd.Adasum if self.adasum else hvd.Average
        if self.spec.grad_compression is GradCompression.FP16:
            if self.adasum:  # Adasum combines pairwise, not as a sum: Horovod's own cast
                compression = hvd.Compression.fp16
            else:  # DDP's fp16_compress_hook order: divide before the fp16 sum
                compression, op = _PrescaledFP16(hvd.size()), hvd.Sum
        self._op_name = "adasum" if self.adasum else ("sum" if op == hvd.Sum else "average")
        self.optimizer = hvd.DistributedOptimizer(
            optimizer,
            named_parameters=self.module.named_parameters(),
            compression=compression,
            op=op,
        )

    def train_step(self, batch: Any, lr: float) -> Any:
        if self.spec.bn_buffers is BNBuffers.BROADCAST and self._buffers and self.world_size > 1:
            # what DDP's broadcast_buffers does, done the Horovod way
            for i, buf in enumerate(self._buffers):
                self.hvd.broadcast_(buf, root_rank=0, name=f"bench.buffer.{i}")
            self._phase("buffers")  # a collective: kept out of the forward's own work
        return super().train_step(batch, lr)

    def _apply_step(self) -> None:
        if not (self._scaler.is_enabled() and self.spec.grad_sync):
            return super()._apply_step()
        # Horovod's recipe with a loss scaler: finish the allreduce first, so that every
        # rank unscales (and checks for inf) the same averaged gradients.
        self.optimizer.synchronize()  # type: ignore[attr-defined]
        self._scaler.unscale_(self.optimizer)
        with self.optimizer.skip_synchronize():  # type: ignore[attr-defined]
            self._scaler.step(self.optimizer)
        self._scaler.update()

    # The harness's own collectives keep fixed names. Unnamed, Horovod names each call
    # anew ("allreduce.noname.N"), and every new name stays in its response cache: at 2
    # workers the training steps slowed as epochs went by (0.879 [0.826, 0.911] of
    # Horovod's recipe over 75 epochs; 1.02 over 7), seen from separate processes
    # (tests/benchmarks/independent_overhead.py --mode turns). One call at a time, so
    # a name is never in flight twice.
    def allreduce_sum(self, arr: np.ndarray) -> np.ndarray:
        out = self.hvd.allreduce(self._tensor(arr), op=self.hvd.Sum, name="bench.allreduce_sum")
        return out.cpu().numpy()

    def allgather(self, arr: np.ndarray) -> np.ndarray:
        t = self._tensor(arr).unsqueeze(0)
        return self.hvd.allgather(t, name="bench.allgather").cpu().numpy()

    def barrier(self) -> None:
        self.hvd.barrier()

    def allreduce_inplace(self, buf: Any) -> None:
        self.hvd.allreduce_(buf, op=self.hvd.Sum, name="bench.collective")

    def versions(self) -> dict[str, Any]:
        import horovod

        hvd = self.hvd
        return {
            "torch": torch.__version__,
            "horovod": horovod.__version__,
            "horovod_build": {
                "gloo": bool(hvd.gloo_built()),
                "mpi": bool(hvd.mpi_built()),
                "nccl": bool(hvd.nccl_built()),
            },
            # what Horovod's core ran with (gloo_enabled() is true under MPI too: CPU
            # tensor operations stay on Gloo)
            "controller": self.controller,
            "cuda": torch.version.cuda,
        }

    def knobs(self) -> dict[str, Any]:
        return {
            "fusion_threshold_bytes": int(os.environ["HOROVOD_FUSION_THRESHOLD"]),
            # a number as it took effect; null: Horovod's default
            "cycle_time_ms": (
                float(os.environ["HOROVOD_CYCLE_TIME"])
                if "HOROVOD_CYCLE_TIME" in os.environ
                else None
            ),
            # HOROVOD_* settings that came from horovodrun's flags or the environment
            "set_by_launcher": sorted(self.from_launcher),
            "gradient_compression": self.spec.grad_compression.value,
            **({} if self.adasum else self.compression_knobs()),
            "op": getattr(self, "_op_name", "adasum" if self.adasum else "average"),
            "controller": self.controller,
            "bn_buffers": self.spec.bn_buffers.value,
            "autotune": self.autotune,
            "timeline": "timeline" in self.options,
            "grad_sync": self.spec.grad_sync,
            **self.amp_knobs(),
        }

    def comm_probe(self) -> CommProbe:
        if os.environ.get("HOROVOD_TIMELINE") != "DYNAMIC" or not self.spec.grad_sync:
            return CommProbe(  # a timeline option records the whole run instead
                "not measured: Horovod's timeline is opt-in (--engine-option "
                "horovod:comm_timeline=true), since arming it slows the timed steps"
            )
        return _TimelineProbe(self.hvd, self.rank)

    def tracer(self, folder: Path, keep: bool) -> Tracer:
        armed = os.environ.get("HOROVOD_TIMELINE") == "DYNAMIC" and self.spec.grad_sync
        return _HorovodTracer(
            str(folder / f"torch-trace.rank{self.rank}.json") if keep else None,
            self.spec.device is Device.CUDA,
            self.hvd,
            self.rank,
            str(folder / "horovod-timeline.json") if armed else None,
        )

    def finish(self, steps: int) -> dict[str, Any]:
        if "timeline" not in self.options:
            return {}
        self.hvd.stop_timeline()  # flushes and closes the file (written by rank 0)
        if self.rank != 0:
            return {}
        path = self.options["timeline"]
        whole: Trace = {"path": path, "format": "chrome-json-array", "tool": HOROVOD_TIMELINE,
                        "steps": steps, "ranks": [0]}  # fmt: skip
        return {"timeline": timeline.summarise(path, steps), "traces": [whole]}

    def shutdown(self) -> None:
        """hvd.shutdown() joins Horovod's background thread (and its Gloo contexts)."""
        self.hvd.shutdown()
