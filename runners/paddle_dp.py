#!/usr/bin/env python3
"""Train one reference model under PaddlePaddle DataParallel and append a result record.

python -m paddle.distributed.launch --nproc_per_node 4 runners/paddle_dp.py --model lenet
"""

import sys
from pathlib import Path

# Run as a script, this file's folder is first on sys.path; the repository root
# must be importable too when the package is not installed.
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from runners._bootstrap import ensure_venv

ensure_venv()

from bench.engines import Engine  # noqa: E402
from runners.protocol.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(Engine.PADDLE))
