"""The collective at 2 workers: a 1 MiB gloo allreduce between this process and a peer.

The peer is a real second process that performs exactly as many allreduces as
the benchmark will (one when benchmarks are disabled, warm-up + rounds when they
run), so neither side can hang waiting for the other; every wait is bounded by
the process group's time-out.
"""

from __future__ import annotations

import datetime
import socket
import subprocess
import sys
from typing import Any

from bench.core import machine as env

PEER = """
import datetime, sys, torch, torch.distributed as dist
port, calls, numel = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=1, world_size=2,
                        timeout=datetime.timedelta(seconds=60))
t = torch.ones(numel)
for _ in range(calls):
    dist.all_reduce(t)
dist.destroy_process_group()
"""
ROUNDS, WARMUP, NUMEL = 30, 5, (1 << 20) // 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_allreduce_1mib_2_workers(benchmark: Any) -> None:
    import torch
    import torch.distributed as dist

    calls = 1 if benchmark.disabled else ROUNDS + WARMUP
    port = _free_port()
    peer = subprocess.Popen([sys.executable, "-c", PEER, str(port), str(calls), str(NUMEL)])
    try:
        torch.set_num_threads(1)
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=0,
            world_size=2,
            timeout=datetime.timedelta(seconds=60),
        )
        t = torch.ones(NUMEL)
        benchmark.extra_info.update(
            {
                "engine": "ddp (torch.distributed gloo)",
                "model": "allreduce 1 MiB",
                "workers": 2,
                "versions": env.library_versions(),
            }
        )
        benchmark.pedantic(dist.all_reduce, args=(t,), rounds=ROUNDS, warmup_rounds=WARMUP)
        assert float(t[0]) == 2.0**calls  # every call really summed over both processes
        dist.destroy_process_group()
        assert peer.wait(timeout=60) == 0
    finally:
        if peer.poll() is None:
            peer.kill()
