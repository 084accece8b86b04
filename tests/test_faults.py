"""Faults injected into real runs: a killed worker, a hung worker, Ctrl-C on a sweep.

Each fault must end as a record (failed / timeout) within the cell's time-out,
with no process of the cell left behind, and the sweep must go on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest

from bench import records
from bench.engines import Engine
from bench.spec import RunSpec
from bench.sweep import SweepConfig, plan, run_cell
from tests.conftest import ROOT

pytestmark = pytest.mark.distributed

ENGINES = [Engine.HOROVOD, Engine.DDP, Engine.PADDLE]
# Long enough to be caught mid-run (each run takes ~minutes if left alone).
LONG = RunSpec(model="mlp", epochs=400, warmup_steps=2)
# The variable each launcher uses to tell a worker its rank.
RANK_VAR = {Engine.HOROVOD: "HOROVOD_RANK", Engine.DDP: "RANK", Engine.PADDLE: "PADDLE_TRAINER_ID"}


def _procs_with(marker: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if marker in " ".join(p.info["cmdline"] or []):
                found.append(p)
        except psutil.Error:
            continue
    return found


def _worker(marker: str, engine: Engine, rank: int, deadline: float) -> psutil.Process:
    """The worker process of `rank`, once it has had a few seconds to start training."""
    while time.monotonic() < deadline:
        for p in _procs_with(marker):
            try:
                if p.environ().get(RANK_VAR[engine]) == str(rank) and "runners/" in " ".join(
                    p.cmdline()
                ):
                    time.sleep(4)  # past start-up, into the training loop
                    return p
            except psutil.Error:
                continue
        time.sleep(0.2)
    raise AssertionError(f"no rank {rank} worker of {engine.value} appeared")


def _inject(
    engine: Engine, tmp_path: Path, sig: signal.Signals, timeout: float
) -> tuple[str, float, str]:
    marker = uuid.uuid4().hex
    cfg = SweepConfig(engines=(engine,), workers=(2,), models=("mlp",), repeats=1, comm_cost=False)
    cell = plan(cfg, LONG)[0]
    # the marker rides in the log dir path, which is on every worker's command line
    run_dir = tmp_path / f"runs-{marker}"
    injected: list[str] = []

    def inject() -> None:
        victim = _worker(marker, engine, 1, time.monotonic() + 120)
        victim.send_signal(sig)
        injected.append(str(victim.pid))

    t = threading.Thread(target=inject, daemon=True)
    t.start()
    start = time.monotonic()
    res = run_cell(cell, 1, tmp_path / "res", run_dir, timeout, "env", "sweep")
    elapsed = time.monotonic() - start
    t.join(timeout=5)
    assert injected, "the fault was never injected"
    time.sleep(1)
    assert _procs_with(marker) == [], "processes of the cell outlived it"
    rec = records.load([tmp_path / "res"]).records[-1]
    assert rec["status"] == res.status
    return res.status, elapsed, rec.get("error") or ""


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.value)
def test_killed_worker_is_recorded_failed_and_reaped(engine: Engine, tmp_path: Path) -> None:
    status, elapsed, error = _inject(engine, tmp_path, signal.SIGKILL, timeout=90)
    assert status in (records.Status.FAILED, records.Status.TIMEOUT)
    assert elapsed < 90 + 20
    assert error


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.value)
def test_hung_worker_times_out_and_is_reaped(engine: Engine, tmp_path: Path) -> None:
    """SIGSTOP freezes rank 1: rank 0 waits in a collective until the cell's time-out."""
    status, elapsed, error = _inject(engine, tmp_path, signal.SIGSTOP, timeout=25)
    assert status == records.Status.TIMEOUT
    assert 25 <= elapsed < 25 + 20
    assert "time-out of 25s" in error


def test_ctrl_c_stops_the_sweep_keeps_records_and_resumes(tmp_path: Path) -> None:
    def sweep(epochs: int) -> list[str]:
        return [
            sys.executable,
            "-m",
            "bench.cli",
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
    deadline = time.monotonic() + 120
    # two cells of the first sweep, then the interrupted sweep's first cell
    while (
        time.monotonic() < deadline and len(list((tmp_path / "runs").glob("*/*/launcher.log"))) < 3
    ):
        time.sleep(0.2)
    time.sleep(4)
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "rerun to resume" in err
    time.sleep(1)
    assert _procs_with(str(tmp_path)) == [], "workers outlived the interrupted sweep"
    recs = records.load([tmp_path]).records
    # the two finished cells, and the interrupted one recorded as such
    assert [r["status"] for r in recs] == ["ok", "ok", "failed"]
    assert "interrupted by SIGINT" in str(recs[2]["error"])
    # the rerun of the first sweep resumes: everything already recorded
    again = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert again.returncode == 0 and "2 cells (2 already recorded, skipped)" in again.stdout
