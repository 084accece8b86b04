#!/usr/bin/env python3
"""Does `destroy_process_group()` end the Gloo group's threads? With and without DDP.

    .venv/bin/python tests/probes/gloo_threads.py

One process, a one-rank Gloo group each case, in a fresh interpreter: the group is
made, optionally wrapped by DDP (fp16 compression hook, one backward) and released
in the runners' order, then destroyed. Prints whether the group object survived
and which Gloo threads (pt_gloo_runloop, gloo_tcp_loop) are still running. With
torch 2.13 the group and its threads outlive `destroy_process_group()` once any DDP
wrapper was built, whatever the order of release (docs/findings.md, "The abort at exit").
"""

from __future__ import annotations

import socket
import subprocess
import sys

CASE = """
import gc, os, sys, weakref
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

ddp, port = sys.argv[1] == "ddp", sys.argv[2]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
dist.init_process_group("gloo", rank=0, world_size=1)
group = weakref.ref(dist.group.WORLD)
if ddp:
    model = DDP(torch.nn.Linear(64, 64))
    model.register_comm_hook(dist.group.WORLD, default_hooks.fp16_compress_hook)
    model(torch.randn(8, 64)).sum().backward()
    del model  # the runners' order: the wrapper first, collect, destroy, collect
    gc.collect()
dist.destroy_process_group()
gc.collect()
tasks = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
gloo = sorted(t for t in tasks if "gloo" in t)
print(f"{'with DDP' if ddp else 'no DDP'}: group alive after destroy: {group() is not None}; "
      f"Gloo threads still running: {gloo or 'none'}")
"""


def free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def main() -> int:
    for case in ("plain", "ddp"):
        out = subprocess.run(
            [sys.executable, "-c", CASE, case, free_port()], capture_output=True, text=True
        )
        print(out.stdout.strip() or out.stderr[-2000:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
