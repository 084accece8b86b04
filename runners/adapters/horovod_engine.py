"""Horovod (PyTorch backend): started by horovodrun, gradients averaged by its optimizer.

Its settings reach the worker as HOROVOD_* variables (from the engine options, or
from horovodrun's own flags, read back and recorded); the controller (Gloo or MPI)
is the launcher's, else the options' (bench/engines/horovod.py, resolve_controller).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench import engines
from bench.contract.spec import BNBuffers, Device, GradCompression, RunSpec
from bench.core.errors import InputError, SpecError
from bench.engines import Engine
from bench.engines import horovod as horovod_entry
from bench.measure import timeline
from bench.records.types import Trace
from models.base import ModelDef, Shape, Weights
from runners.adapters.base import CommProbe, Tracer
from runners.adapters.fp16_compression import PrescaledFP16
from runners.adapters.horovod_timeline import HOROVOD_TIMELINE, HorovodTracer, TimelineProbe
from runners.adapters.torch_base import TorchAdapter


def _swap_batchnorm(module: torch.nn.Module, make: Any) -> None:
    """Replace every BatchNorm in `module` by make(bn), carrying its weights and statistics."""
    for name, child in module.named_children():
        if isinstance(child, torch.nn.modules.batchnorm._BatchNorm):
            new = make(child)
            new.load_state_dict(child.state_dict())
            setattr(module, name, new)
        else:
            _swap_batchnorm(child, make)


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
        # the launcher's controller where it announced one, else the options'
        self.controller, self.controller_from = horovod_entry.resolve_controller(
            self.options, os.environ
        )

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
        # Said explicitly: an MPI build defaults to the MPI controller whatever started
        # the worker, and under mpirun nothing sets HOROVOD_CONTROLLER (resolve_controller
        # read the launcher already).
        os.environ["HOROVOD_CONTROLLER"] = self.controller
        if self.controller == "gloo":
            # An MPI build may run CPU tensor operations over MPI by default, even under
            # the Gloo controller; without MPI_Init (no mpirun) that aborts the process.
            os.environ.setdefault("HOROVOD_CPU_OPERATIONS", "gloo")
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
            why = "engine option " + ("adasum=true" if self.adasum else "controller=mpi")
            if self.controller_from.startswith("launcher:"):
                why = f"{self.controller_from.removeprefix('launcher:')} (the MPI controller)"
            raise SpecError(
                f"{why} needs Horovod built with MPI (HOROVOD_WITH_MPI=1); this build has Gloo "
                "only: launch with horovodrun --gloo, or install an MPI (apt-get install "
                "libopenmpi-dev openmpi-bin) and rerun scripts/setup.sh"
            )
        hvd.init()
        if self.controller == "mpi" and not hvd.mpi_enabled():
            raise RuntimeError("Horovod was asked for the MPI controller but did not enable MPI")
        self.hvd = hvd
        # which library moved the tensors: the build's default unless HOROVOD_CPU_OPERATIONS
        # said otherwise, read back from the contexts Horovod enabled (a second context
        # beside the controller's is the one the operations use)
        other = "mpi" if self.controller == "gloo" else "gloo"
        second = hvd.mpi_enabled() if other == "mpi" else hvd.gloo_enabled()
        self.cpu_operations = other if second else self.controller
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
                compression, op = PrescaledFP16(hvd.size()), hvd.Sum
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
            # what Horovod's core ran with
            "controller": self.controller,
            "cpu_operations": self.cpu_operations,
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
            # "launcher:<name>", "environment", "option" or "default"
            "controller_from": self.controller_from,
            "cpu_operations": self.cpu_operations,
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
        return TimelineProbe(self.hvd, self.rank)

    def tracer(self, folder: Path, keep: bool) -> Tracer:
        armed = os.environ.get("HOROVOD_TIMELINE") == "DYNAMIC" and self.spec.grad_sync
        return HorovodTracer(
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
        whole: Trace = {
            "path": path,
            "format": "chrome-json-array",
            "tool": HOROVOD_TIMELINE,
            "steps": steps,
            "ranks": [0],
        }
        return {"timeline": timeline.summarise(path, steps), "traces": [whole]}

    def shutdown(self) -> None:
        """hvd.shutdown() joins Horovod's background thread (and its Gloo contexts)."""
        self.hvd.shutdown()
