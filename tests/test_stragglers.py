"""Stragglers told by who waits for whom, on conditions made with ordinary Linux tools.

Each condition is made outside the suite, the way an operator meets it, and every
engine's 2-worker verdict must name its cause:
- rank 1 of every 2-worker cell alone in a cgroup with a CPU quota of a third of a core
  (moved there by pid once it starts, as `cgclassify` would): a straggler, rank 1;
- two busy processes beside the run (`python -c 'while True: pass'` x2): every rank
  slowed alike, CPU-contended, no straggler (tests/test_stragglers_busy.py: that
  condition needs no quiet machine);
- the two workers across a link shaped to 20 Mbit (`--emulate-link`): communication;
- nothing else running: no straggler.
The runs are short mlp runs; the rule's thresholds are docs/why.md's. Only the slow
link's verdict names a part of the time lost, which needs the compute-only twins; the
quota's and the idle machine's runs skip them (`--no-comm-cost`: half the launches of a
file that has the machine to itself). Each condition's 2-worker runs are measured
against the same 1-worker runs, made on the quiet machine. The file runs alone
(`alone`: under pytest-xdist the other process waits), since every verdict reads what
else used the CPUs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
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
from tests.conftest import NO_EXTRA_WINDOWS, run_bench

ENGINES = ("ddp", "horovod", "paddle")
SWEEP: tuple[str, ...] = ("--engines", ",".join(ENGINES), "--models", "mlp")
SWEEP += ("--max-steps", "30", "--warmup-steps", "2", "--profile-steps", "10", "--no-compare")
SWEEP += tuple(NO_EXTRA_WINDOWS)  # the verdicts read the profiled steps and the probes
# The whole file runs in its own turn on the machine; a turn may first wait for the file
# running beside it to end, which counts against the time-out.
pytestmark = [pytest.mark.alone, pytest.mark.distributed, pytest.mark.timeout(1800)]
# The variables by which each launcher tells a worker its rank.
RANK_VARIABLES = ("RANK", "HOROVOD_RANK", "PADDLE_TRAINER_ID", "OMPI_COMM_WORLD_RANK")


def sweep(results: Path, *args: str) -> None:
    proc = run_bench("run", "--results", str(results), *SWEEP, *args, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]


def verdicts(results: Path) -> pd.DataFrame:
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
def one_worker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 1-worker runs every condition's lost time is measured against."""
    results = tmp_path_factory.mktemp("one") / "res"
    sweep(results, "--workers", "1", "--repeats", "1")
    return results


def _condition(one_worker: Path, name: str) -> Path:
    """A condition's results folder, starting with the 1-worker runs."""
    results = one_worker.parent.parent / name / "res"
    shutil.copytree(one_worker, results)
    return results


@pytest.fixture(scope="module")
def quota(one_worker: Path) -> Iterator[Path]:
    """Two 2-worker runs an engine, rank 1 under a third of a core's quota."""
    if cgroup.why_not():
        pytest.skip(f"no CPU quota cgroup: {cgroup.why_not()}")
    results = _condition(one_worker, "quota")
    name = f"bench-straggler-{os.getpid()}"
    with cgroup.quota_group(1 / 3, name) as procs:
        stop = threading.Event()
        mover = threading.Thread(target=_move_rank_one, args=(procs, stop), daemon=True)
        mover.start()
        try:
            sweep(results, "--workers", "2", "--repeats", "2", "--no-comm-cost")
        finally:
            stop.set()
            mover.join()
    yield results


@pytest.mark.parametrize("engine", ENGINES)
def test_a_rank_under_a_cpu_quota_is_the_straggler(quota: Path, engine: str) -> None:
    row = verdicts(quota).loc[engine]
    assert row["verdict"] == "straggler", row["evidence"]
    assert row["evidence"].startswith("the other ranks wait for rank 1 "), row["evidence"]
    assert "in 2/2 runs" in row["evidence"]


@pytest.fixture(scope="module")
def slow_link(one_worker: Path) -> Path:
    """One 2-worker run an engine, across a link shaped to 20 Mbit."""
    why = netns.available(shaping=True)
    if why is not None:
        pytest.skip(f"no shaped namespaces: {why}")
    results = _condition(one_worker, "link")
    sweep(results, "--workers", "2", "--repeats", "1", "--emulate-link", "20mbit")
    return results


@pytest.mark.parametrize("engine", ENGINES)
def test_a_slow_link_is_communication_not_a_straggler(slow_link: Path, engine: str) -> None:
    row = verdicts(slow_link).loc[f"{engine}@2nodes/20mbit"]
    # mlp's 69 KB of gradients take tens of ms a step at 20 Mbit, against about a
    # millisecond of compute: the time lost is communication. Horovod's background
    # thread may spend that time polling the link on CPU, so on two saturated cores
    # the part can read as comm CPU rather than comm wait (docs/why.md).
    parts = ("comm wait", "comm CPU")
    assert row["largest part"] in parts and row["lost ms"] > 10, row["evidence"]
    assert row["verdict"] in ("communication-bound", "comm-CPU-bound"), row["evidence"]
    assert "no straggler" in row["evidence"]


@pytest.fixture(scope="module")
def idle(one_worker: Path) -> Path:
    """One 2-worker run an engine, nothing else running."""
    results = _condition(one_worker, "idle")
    sweep(results, "--workers", "2", "--repeats", "1", "--no-comm-cost")
    return results


@pytest.mark.parametrize("engine", ENGINES)
def test_nothing_else_running_makes_no_straggler(idle: Path, engine: str) -> None:
    row = verdicts(idle).loc[engine]
    # "nothing else" is the suite's side: a CI machine's own daemons may still take a
    # fifth of a core and more over a short run, which the verdict rightly says
    assert row["verdict"] != "straggler", row["evidence"]
    assert "no straggler: " in row["evidence"]
