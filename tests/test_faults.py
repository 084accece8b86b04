"""Faults injected into real runs: a killed worker, a hung worker, Ctrl-C on a sweep.

Each fault must end as a record (failed / timeout) within the cell's time-out,
with no process of the cell left behind, and the sweep must go on.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from bench import engines, records
from bench.contract.spec import RunSpec
from bench.engines import Engine
from bench.launch import process
from bench.sweep import SweepConfig, plan, run_cell
from tests.conftest import NO_EXTRA_WINDOWS, NO_PROFILE, ROOT

pytestmark = pytest.mark.distributed

ENGINES = [Engine.HOROVOD, Engine.DDP, Engine.PADDLE]
# Long enough to be caught mid-run (each run takes ~minutes if left alone).
LONG = RunSpec(model="mlp", epochs=400, warmup_steps=2)


def _procs_with(marker: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if marker in " ".join(p.info["cmdline"] or []):
                found.append(p)
        except psutil.Error:
            continue
    return found


def _wait_for(cond: Callable[[], bool], seconds: float, what: str) -> None:
    """Until `cond()` holds: waiting on the event itself, never on the clock alone."""
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {seconds:.0f}s")
        time.sleep(0.2)


# Hung-worker cells start this far apart (see hung_cells).
STAGGER_S = 8.0

# The fault each signal stands for, injected by rank 1 itself at its step 3 (runners/
# protocol/faults.py): inside the training loop for certain, however fast the machine.
FAULTS = {signal.SIGKILL: "kill:rank=1,step=3", signal.SIGSTOP: "stall:rank=1,step=3"}


def _inject(
    engine: Engine, tmp_path: Path, sig: signal.Signals, timeout: float, set_fault: bool = True
) -> tuple[str, float, str]:
    """Run one 2-worker cell whose rank 1 injects `sig`'s fault: (status, seconds, error).

    `set_fault=False`: BENCH_TEST_FAULT is already set by the caller (threads share the
    environment, so concurrent calls must not each set and restore it)."""
    marker = uuid.uuid4().hex
    cfg = SweepConfig(engines=(engine,), workers=(2,), models=("mlp",), repeats=1, comm_cost=False)
    cell = plan(cfg, LONG)[0]
    # the marker rides in the log dir path, which is on every worker's command line
    run_dir = tmp_path / f"runs-{marker}"
    start = time.monotonic()
    with _environ(BENCH_TEST_FAULT=FAULTS[sig]) if set_fault else contextlib.nullcontext():
        res = run_cell(cell, 1, tmp_path / "res", run_dir, timeout, "env", "sweep")
    elapsed = time.monotonic() - start
    logs = "".join(f.read_text(errors="replace") for f in run_dir.rglob("*") if f.is_file())
    assert f"rank 1 injects {FAULTS[sig].split(':')[0]}" in logs, "the fault never happened"
    assert _procs_with(marker) == [], "processes of the cell outlived it"
    rec = records.load([tmp_path / "res"]).records[-1]
    assert rec["status"] == res.status
    # the command the cell's folder showed while it ran goes once the record holds it: a
    # record bench wrote, or one whose workers saw the launcher's own command
    shown = res.log_dir / "argv.json"
    if rec["launcher"]["name"] == "bench run":
        assert str(engines.get(engine).runner) in rec["launcher"]["argv"]
        assert not shown.exists()
    else:
        assert shown.exists() == (engine is Engine.HOROVOD), rec["launcher"]
    return res.status, elapsed, rec.get("error") or ""


def _cell_procs(*markers: str) -> list[psutil.Process]:
    """Processes whose command line holds every marker."""
    found = []
    for p in _procs_with(markers[0]):
        try:
            if all(m in " ".join(p.cmdline()) for m in markers):
                found.append(p)
        except psutil.Error:
            continue
    return found


@contextlib.contextmanager
def _environ(**values: str) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.value)
def test_killed_worker_is_recorded_failed_and_reaped(engine: Engine, tmp_path: Path) -> None:
    status, elapsed, error = _inject(engine, tmp_path, signal.SIGKILL, timeout=90)
    assert status in (records.Status.FAILED, records.Status.TIMEOUT)
    assert elapsed < 90 + 20
    assert error


@pytest.mark.parametrize(
    ("engine", "rank"),
    [(Engine.HOROVOD, 1), (Engine.DDP, 1), (Engine.PADDLE, 1), (Engine.DDP, 0)],
    ids=["horovod", "ddp", "paddle", "ddp-rank0"],
)
def test_a_run_that_dies_at_exit_keeps_its_record(
    engine: Engine, rank: int, tmp_path: Path
) -> None:
    """A worker that finished its work and then aborts at exit (as a thread left running
    at exit makes C++ do) fails its launcher: the cell is still the run's ok record."""
    cfg = SweepConfig(engines=(engine,), workers=(2,), models=("mlp",), repeats=1,
                      comm_cost=False, measure_cap_s=0.0)  # fmt: skip
    cell = plan(cfg, RunSpec(model="mlp", epochs=1, max_steps=12, warmup_steps=2))[0]
    fault = f"abort:rank={rank}"
    with _environ(BENCH_TEST_FAULT=fault):
        res = run_cell(cell, 1, tmp_path / "res", tmp_path / "runs", 240, "env", "sweep")
    logs = "".join(
        f.read_text(errors="replace") for f in (tmp_path / "runs").rglob("*") if f.is_file()
    )
    assert f"rank {rank} injects abort" in logs, "the fault never happened"
    assert res.status == records.Status.OK, res.error
    (rec,) = records.load([tmp_path / "res"]).records
    assert rec["status"] == records.Status.OK and rec["injected"] == fault


# The hung cells, overlapped in one pool (see `hung_cells`): Horovod at the longer
# time-out first, then every engine at the time-out under the collective one.
HUNG = [("horovod-at-45", Engine.HOROVOD, 45.0), *((e.value, e, 28.0) for e in ENGINES)]


@pytest.fixture(scope="module")
def hung_cells(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, float, str]]:
    """SIGSTOP freezes rank 1 of each cell in HUNG: (status, seconds, error) by name.

    The cells overlap (each in its own folder): after the fault they only wait, so the
    tests below wait about one time-out instead of four. Their starts are STAGGER_S
    apart, so that no cell's start-up (which the time-out counts) competes with
    another's for the cores; the longest time-out starts first."""
    root = tmp_path_factory.mktemp("hung")

    def staggered(i: int, name: str, engine: Engine, timeout: float) -> tuple[str, float, str]:
        time.sleep(i * STAGGER_S)
        return _inject(engine, root / name, signal.SIGSTOP, timeout, set_fault=False)

    with (
        _environ(BENCH_TEST_FAULT=FAULTS[signal.SIGSTOP]),  # once, for every thread
        concurrent.futures.ThreadPoolExecutor(len(HUNG)) as pool,
    ):
        jobs = {cell[0]: pool.submit(staggered, i, *cell) for i, cell in enumerate(HUNG)}
        return {name: job.result() for name, job in jobs.items()}


def test_hung_worker_times_out_and_is_reaped(hung_cells: dict[str, tuple[str, float, str]]) -> None:
    """SIGSTOP freezes rank 1: rank 0 waits in a collective until the cell's time-out.

    The time-out stays under the runner's collective time-out (30 s at least), so it is
    the cell's that ends the hang."""
    for engine in ENGINES:
        status, elapsed, error = hung_cells[engine.value]
        assert status == records.Status.TIMEOUT, (engine, error)
        assert 28 <= elapsed < 28 + 20, (engine, elapsed)
        assert "time-out of 28s" in error, (engine, error)


def test_stopped_horovod_rank_is_a_timeout_bounded_by_the_cell_timeout(
    hung_cells: dict[str, tuple[str, float, str]],
) -> None:
    """At --timeout 45 the runner's collective time-out (30 s) may come first; the SIGSTOPped
    rank must still end as `timeout`, and the kill must not wait out a stopped process
    (it took 52 s: SIGTERM stays pending until SIGCONT, so the grace period ran out)."""
    status, elapsed, error = hung_cells["horovod-at-45"]
    print(f"horovod SIGSTOP at --timeout 45: {status} after {elapsed:.1f}s")
    assert status == records.Status.TIMEOUT, error
    # only an upper bound: the collective time-out can end the cell before --timeout
    # (start-up + 30 s), on a fast machine well before it
    assert elapsed < 45 + 4


def test_ctrl_c_stops_the_sweep_keeps_records_and_resumes(tmp_path: Path) -> None:
    def sweep(epochs: int) -> list[str]:
        return [
            sys.executable,
            "-m",
            "bench",
            "run",
            "--engines",
            "ddp",
            "--workers",
            "1",
            "--models",
            "mlp",
            "--repeats",
            "2",
            "--epochs",
            str(epochs),
            "--results",
            str(tmp_path),
            "--no-compare",
            # what is checked is which cells are recorded, not their throughput
            *NO_EXTRA_WINDOWS,
            *NO_PROFILE,
        ]

    args = sweep(3)
    # first: a complete short sweep leaves 2 records
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    # then a long one, interrupted while its first cell trains
    long_args = sweep(400)
    proc = subprocess.Popen(
        long_args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    # the interrupted sweep's first cell: its worker running (started or training, a
    # cell interrupted either way is recorded so)
    cell = [str(tmp_path), "runners/ddp.py"]
    _wait_for(lambda: bool(_cell_procs(*cell)), 120, "the interrupted sweep's worker")
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "rerun to resume" in err
    assert _procs_with(str(tmp_path)) == [], "workers outlived the interrupted sweep"
    recs = records.load([tmp_path]).records
    # the two finished cells, and the interrupted one recorded as such
    assert [r["status"] for r in recs] == ["ok", "ok", "failed"]
    assert "interrupted by SIGINT" in str(recs[2]["error"])
    # its record holds the command its folder showed while it ran
    assert not (Path(recs[2]["labels"]["log_dir"]) / "argv.json").exists()
    # the rerun of the first sweep resumes: everything already recorded
    again = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert again.returncode == 0 and "2 cells (2 already recorded, skipped)" in again.stdout


def test_ctrl_c_inside_the_launch_itself_kills_what_it_started(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Ctrl-C landing after the fork and before Popen returns (the launcher's process
    exists, its handle not yet): the launcher must still be killed, not left to train.

    The signal is raised at exactly that point, in this process, under its default
    Ctrl-C handler; the launcher is a real process that would otherwise sleep a minute.
    """
    marker = f"launched-{uuid.uuid4().hex}"
    execute_child = subprocess.Popen._execute_child  # type: ignore[attr-defined]

    def then_ctrl_c(self: subprocess.Popen[bytes], *args: object, **kwargs: object) -> None:
        execute_child(self, *args, **kwargs)
        signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(subprocess.Popen, "_execute_child", then_ctrl_c)
    argv = [sys.executable, "-c", "import time; time.sleep(60)", marker]
    with pytest.raises(KeyboardInterrupt):
        process.run_launches([argv], [tmp_path / "launcher.log"], timeout=120)
    monkeypatch.undo()
    assert _procs_with(marker) == [], "the launcher outlived the Ctrl-C that stopped it"
