#!/usr/bin/env python3
"""Allreduce latency and bandwidth of one engine's own collective, across message sizes.

    horovodrun -np 2 runners/allreduce.py --engine horovod
    torchrun --nproc-per-node 2 runners/allreduce.py --engine ddp
    python -m paddle.distributed.launch --nproc_per_node 2 runners/allreduce.py --engine paddle

Bandwidths follow nccl-tests: algorithm bandwidth = bytes / time, bus bandwidth =
algorithm bandwidth x 2(n-1)/n, the per-link traffic of a ring allreduce, which
is comparable across worker counts. Each iteration's time is the slowest rank's
(the collective is done when every rank is), and the latency reported is the
median over iterations.
"""

import sys
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from runners._bootstrap import ensure_venv

ensure_venv()

from runners.protocol.allreduce import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
