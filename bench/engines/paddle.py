"""PaddlePaddle DataParallel: started by paddle.distributed.launch, one launcher per host."""

from __future__ import annotations

from bench.contract.spec import Device, GradCompression, Precision, RunSpec
from bench.core.errors import InputError
from bench.engines.registry import RUNNERS, SETUP, EngineEntry, LaunchRequest
from bench.launch.cluster import Host


def paddle_launch(req: LaunchRequest) -> list[tuple[Host, list[str]]]:
    """paddle.distributed.launch once per host, with the node's rank on a cluster."""
    cluster, per = req.cluster, req.cluster.placement(req.workers)
    out = []
    for node_rank, host in enumerate(cluster.hosts):
        argv = [req.python, "-m", "paddle.distributed.launch"]
        if not cluster.local:
            argv += ["--nnodes", str(len(cluster.hosts)), "--rank", str(node_rank)]
        argv += ["--nproc_per_node", str(per)]
        if not cluster.local:
            # --host: the address peers reach this node at; Paddle guesses it from the
            # host name otherwise, which is wrong on multi-homed machines.
            argv += ["--master", f"{cluster.master.name}:{cluster.port}", "--host", host.name]
        argv += ["--max_restart", "0"]  # a failed worker fails the run, not restarts it
        node_log = req.node_log(node_rank)
        if node_log is not None:
            argv += ["--log_dir", str(node_log)]
        out.append((host, [*argv, req.script, *req.runner_args]))
    return out


def check_spec(spec: RunSpec) -> None:
    """What Paddle's DataParallel cannot run the way the torch engines do."""
    if not float(spec.bucket_mb).is_integer():
        raise InputError(
            f"bucket_mb={spec.bucket_mb}: paddle's DataParallel takes whole megabytes; "
            "use an integer"
        )
    if spec.device is Device.CPU and spec.precision is not Precision.FP32:
        raise InputError(
            f"precision={spec.precision.value} on CPU: paddle's auto_cast keeps its CPU "
            "kernels in fp32, so it would not run what torch runs; use fp32 on CPU, "
            "or device=cuda"
        )
    if spec.grad_compression is not GradCompression.NONE:
        raise InputError(
            f"grad_compression={spec.grad_compression.value}: paddle.DataParallel has no "
            "gradient compression; compare it with grad_compression=none"
        )


ENTRY = EngineEntry(
    name="paddle",
    runner=RUNNERS / "paddle_dp.py",
    adapter="runners.adapters.paddle_engine:PaddleAdapter",
    module="paddle.distributed",
    install_hint=f"{SETUP} (installs paddlepaddle)",
    launcher="paddle.distributed.launch",
    build=paddle_launch,
    launched_by=(("PADDLE_TRAINER_ID", "paddle.distributed.launch"),),
    world_from=(("PADDLE_TRAINERS_NUM", "PADDLE_TRAINER_ID"),),
    check_spec=check_spec,
    # DataParallel's allreduce over Gloo runs synchronously inside backward
    comm_inside_backward=True,
    comm_knobs="a larger --bucket-mb (Paddle's comm_buffer_size)",
    tune_grid=tuple({"bucket_mb": b} for b in (1.0, 25.0, 100.0)),
    colour="#2ca02c",
    line=((0, (1, 2)), "^"),
)
