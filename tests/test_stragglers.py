"""Stragglers told by who waits for whom, on conditions made with ordinary Linux tools.

Each condition is made outside the suite, the way an operator meets it, and every
engine's 2-worker verdict must name its cause:
- rank 1 of every 2-worker cell alone in a cgroup with a CPU quota of a third of a core
  (moved there by pid once it starts, as `cgclassify` would): a straggler, rank 1;
- two busy processes beside the run (`python -c 'while True: pass'` x2): every rank
  slowed alike, CPU-contended, no straggler;
- the two workers across a link shaped to 20 Mbit (`--emulate-link`): communication;
- nothing else running: no straggler (the session's shared sweep).
The runs are short mlp runs; the rule's thresholds are docs/why.md's.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import psutil
import pytest

from bench import records
from bench.launch import netns
from bench.tables import compare
from tests import cgroup
from tests.conftest import run_bench
from tests.shared_sweep import SharedSweep

ENGINES = ("ddp", "horovod", "paddle")
SWEEP: tuple[str, ...] = ("--engines", ",".join(ENGINES), "--models", "mlp")
SWEEP += ("--max-steps", "30", "--warmup-steps", "2", "--profile-steps", "10", "--no-compare")
# The variables by which each launcher tells a worker its rank.
RANK_VARIABLES = ("RANK", "HOROVOD_RANK", "PADDLE_TRAINER_ID", "OMPI_COMM_WORLD_RANK")


def _sweep(results: Path, *args: str) -> None:
    proc = run_bench("run", "--results", str(results), *SWEEP, *args, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]


def _verdicts(results: Path) -> pd.DataFrame:
    """Every 2-worker cell's verdict row, by engine variant."""
    tables = [c.sections.get("verdict") for c in compare.compare(records.load([results]).records)]
    table = pd.concat([t for t in tables if t is not None])
    print(table.to_string())  # the evidence, shown when a test fails
    return table[table["workers"] == 2].set_index("engine")


def _rank_one(proc: psutil.Process) -> bool:
    """Whether `proc` is rank 1 of a runner, by its launcher's variables."""
    try:
        if not any("runners/" in part for part in proc.cmdline()):
            return False
        env = proc.environ()
    except psutil.Error:
        return False
    return any(env.get(v) == "1" for v in RANK_VARIABLES)


def _move_rank_one(procs: Path, stop: threading.Event) -> None:
    """Move every runner's rank 1 into the cgroup of `procs` as soon as it starts."""
    moved: set[int] = set()
    while not stop.wait(0.05):
        for proc in psutil.process_iter():
            if proc.pid not in moved and _rank_one(proc):
                with contextlib.suppress(OSError):
                    procs.write_text(f"{proc.pid}\n")
                    moved.add(proc.pid)


@pytest.fixture(scope="module")
def quota(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Two runs a cell, rank 1 of each 2-worker run under a third of a core's quota."""
    if cgroup.why_not():
        pytest.skip(f"no CPU quota cgroup: {cgroup.why_not()}")
    results = tmp_path_factory.mktemp("quota") / "res"
    name = f"bench-straggler-{os.getpid()}"
    with cgroup.quota_group(1 / 3, name) as procs:
        stop = threading.Event()
        mover = threading.Thread(target=_move_rank_one, args=(procs, stop), daemon=True)
        mover.start()
        try:
            _sweep(results, "--workers", "1,2", "--repeats", "2")
        finally:
            stop.set()
            mover.join()
    yield results


@pytest.mark.distributed
@pytest.mark.parametrize("engine", ENGINES)
def test_a_rank_under_a_cpu_quota_is_the_straggler(quota: Path, engine: str) -> None:
    row = _verdicts(quota).loc[engine]
    assert row["verdict"] == "straggler", row["evidence"]
    assert "ms a step for rank 1 (" in row["evidence"]


@pytest.fixture(scope="module")
def busy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One run a cell, two processes spinning beside every one of them."""
    results = tmp_path_factory.mktemp("busy") / "res"
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        _sweep(results, "--workers", "1,2", "--repeats", "1")
    finally:
        for p in burners:
            p.kill()
            p.wait()
    yield results


@pytest.mark.distributed
@pytest.mark.parametrize("engine", ENGINES)
def test_busy_neighbours_slow_every_rank_alike(busy: Path, engine: str) -> None:
    row = _verdicts(busy).loc[engine]
    assert row["verdict"] == "CPU-contended", row["evidence"]
    assert "other processes used" in row["evidence"]


@pytest.fixture(scope="module")
def slow_link(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One run a cell: 1 worker here, 2 across a link shaped to 20 Mbit."""
    why = netns.available(shaping=True)
    if why is not None:
        pytest.skip(f"no shaped namespaces: {why}")
    results = tmp_path_factory.mktemp("link") / "res"
    _sweep(results, "--workers", "1", "--repeats", "1")
    _sweep(results, "--workers", "2", "--repeats", "1", "--emulate-link", "20mbit")
    yield results


@pytest.mark.distributed
@pytest.mark.parametrize("engine", ENGINES)
def test_a_slow_link_is_communication_not_a_straggler(slow_link: Path, engine: str) -> None:
    row = _verdicts(slow_link).loc[f"{engine}@2nodes/20mbit"]
    # mlp's 69 KB of gradients take tens of ms a step at 20 Mbit, against about a
    # millisecond of compute: waiting, whatever else shares the CPUs
    assert row["verdict"] == "communication-bound", row["evidence"]
    assert row["largest part"] == "comm wait"


@pytest.mark.distributed
def test_nothing_else_running_makes_no_straggler(shared_sweep: SharedSweep) -> None:
    table = _verdicts(shared_sweep.results)
    found = {str(e): str(v) for e, v in table["verdict"].items() if str(e) in ENGINES}
    assert set(found) == set(ENGINES)
    assert "straggler" not in found.values(), found
