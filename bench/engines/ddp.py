"""PyTorch DistributedDataParallel: started by torchrun, one launcher per host."""

from __future__ import annotations

from bench.engines.registry import RUNNERS, SETUP, EngineEntry, LaunchRequest
from bench.launch.cluster import Host


def torchrun(req: LaunchRequest) -> list[tuple[Host, list[str]]]:
    """torchrun once per host: standalone on this machine (a free port of its own, so
    concurrent runs do not collide), else with the node's rank and the first host as
    rendezvous."""
    cluster, per = req.cluster, req.cluster.placement(req.workers)
    out = []
    for node_rank, host in enumerate(cluster.hosts):
        argv = [req.python, "-m", "torch.distributed.run"]
        if cluster.local:
            argv += ["--standalone", "--nnodes", "1"]
        else:
            argv += ["--nnodes", str(len(cluster.hosts)), "--node-rank", str(node_rank)]
        argv += ["--nproc-per-node", str(per)]
        if not cluster.local:
            argv += ["--master-addr", cluster.master.name, "--master-port", str(cluster.port)]
        node_log = req.node_log(node_rank)
        if node_log is not None:
            argv += ["--log-dir", str(node_log), "--tee", "3"]
        out.append((host, [*argv, req.script, *req.runner_args]))
    return out


ENTRY = EngineEntry(
    name="ddp",
    runner=RUNNERS / "ddp.py",
    adapter="runners.adapters.ddp_engine:DDPAdapter",
    module="torch.distributed",
    install_hint=f"{SETUP} (installs torch)",
    launcher="torchrun",
    build=torchrun,
    launched_by=(("TORCHELASTIC_RUN_ID", "torchrun"),),
    world_from=(("WORLD_SIZE", "RANK"),),
    comm_knobs="a larger --bucket-mb (DDP's bucket_cap_mb) or --grad-compression fp16",
    tune_grid=tuple({"bucket_mb": b} for b in (1.0, 5.0, 25.0, 100.0)),
    colour="#d62728",
    line=((0, (5, 3)), "s"),
)
