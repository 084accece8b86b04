"""pytest-benchmark's own flags on `pytest tests/benchmarks` time the benchmarks, as its
users expect; the plain test run stays untimed (pyproject's --benchmark-disable)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

# the cheapest benchmark: a 256 x 256 numpy matmul on one thread
CHEAPEST = "tests/benchmarks/test_perf.py::test_calibration"
TABLE = "benchmark: 1 tests"  # the header of pytest-benchmark's table of timings


def _pytest(*args: str) -> subprocess.CompletedProcess[str]:
    # a pytest of its own, not an xdist worker (pytest-benchmark never times in one)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COLUMNS"))}
    return subprocess.run(
        [sys.executable, "-m", "pytest", CHEAPEST, "-q", "-p", "no:cacheprovider",
         "--benchmark-max-time=0.05", *args],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env=env,
    )  # fmt: skip


def test_autosave_times_and_writes_under_the_storage(tmp_path: Path) -> None:
    proc = _pytest("--benchmark-autosave", f"--benchmark-storage=file://{tmp_path}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert TABLE in proc.stdout
    (saved,) = tmp_path.rglob("0001_*.json")
    (bench,) = json.loads(saved.read_text())["benchmarks"]
    assert bench["name"] == "test_calibration" and bench["stats"]["rounds"] >= 1


def test_json_times_and_writes_the_file(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    proc = _pytest(f"--benchmark-json={out}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (bench,) = json.loads(out.read_text())["benchmarks"]
    assert bench["stats"]["min"] > 0


@pytest.mark.parametrize(
    "args", [[], ["--benchmark-disable", "--benchmark-autosave"]], ids=["plain", "disable-typed"]
)
def test_without_those_flags_or_with_disable_typed_nothing_is_timed(
    args: list[str], tmp_path: Path
) -> None:
    proc = _pytest(*args, f"--benchmark-storage=file://{tmp_path}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert TABLE not in proc.stdout and not list(tmp_path.iterdir())
