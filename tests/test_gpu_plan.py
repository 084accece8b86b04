"""The GPU path as far as a CPU machine can check it: the plan, and the gpu-test guard."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_gpu_check_dry_run_prints_the_plan(tmp_path: Path) -> None:
    proc = subprocess.run(
        ["bash", "scripts/gpu_check.sh", "--dry-run", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "BENCH_GPUS": "4"},
    )
    assert proc.returncode == 0, proc.stderr
    launches = [ln for ln in proc.stdout.splitlines() if "/runners/" in ln]
    # resnet50: 3 engines x (1, 4 GPUs) x 2 repeats; lenet: 3 engines x (1, 4) x 1
    assert len(launches) == 18
    assert all("--device cuda" in ln for ln in launches)
    assert sum("--model resnet50" in ln for ln in launches) == 12
    assert any("horovodrun -np 4" in ln for ln in launches)
    assert any("--nproc-per-node 4" in ln for ln in launches)
    assert any("--nproc_per_node 4" in ln for ln in launches)
    assert "BENCH_EXPECT_GPU=1" in proc.stdout and "tests/test_gpu.py" in proc.stdout
    assert not (tmp_path / "out").exists()  # a dry run writes nothing


def test_gpu_tests_fail_when_a_gpu_is_expected_but_missing() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the guard for a missing one has nothing to catch")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/test_gpu.py", "-q", "-p", "no:cacheprovider",
         "-k", "one_gpu_per_rank and ddp"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "BENCH_EXPECT_GPU": "1"},
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "BENCH_EXPECT_GPU=1 but torch sees no CUDA GPU" in proc.stdout
    # and without the variable the same test is skipped, saying why
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/test_gpu.py", "-q", "-p", "no:cacheprovider",
         "-k", "one_gpu_per_rank and ddp", "-rs"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "BENCH_EXPECT_GPU"},
    )  # fmt: skip
    assert proc.returncode == 0 and "no CUDA GPU on this machine" in proc.stdout
