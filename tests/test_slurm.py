"""Slurm: cells as job steps of an allocation, sweeps submitted with sbatch, the refusals.

The launches run for real in a single-machine Slurm cluster started from Debian's
packages (tests/slurm_cluster.py; root only, skipped with the reason otherwise).
Losses are compared to DDP's with the tolerance of tests/test_horovod_mpi.py (1e-6
relative): CPU tensor operations are the same maths under every launch path.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import numpy as np
import psutil
import pytest
import yaml

from bench import engines, records
from bench.engines import Engine, horovod
from bench.launch import cluster as launch
from bench.launch import slurm
from tests import slurm_cluster
from tests.conftest import ROOT, run_bench

TINY = ["--models", "mlp", "--repeats", "1", "--no-comm-cost", "--no-compare"]
TINY += ["--epochs", "1", "--max-steps", "20", "--target-ci", "0"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[slurm_cluster.SlurmCluster]:
    why = slurm_cluster.unavailable()
    if why:
        pytest.skip(why)
    start = time.monotonic()
    running = slurm_cluster.start()
    print(f"Slurm cluster started in {time.monotonic() - start:.1f}s")
    try:
        yield running
    finally:
        running.stop()


def _in_allocation(
    cluster: slurm_cluster.SlurmCluster,
    tasks: int,
    *args: str,
    timeout: float = 900,
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`bench run ARGS` inside `salloc --ntasks TASKS` of the test cluster."""
    argv = ["salloc", "--ntasks", str(tasks), "--", sys.executable, "-m", "bench", "run"]
    return subprocess.run(
        [*argv, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**cluster.environ(), **(extra_env or {})},
        stdin=subprocess.DEVNULL,
    )


def _records(results: Path) -> list[dict[str, Any]]:
    return cast(list[dict[str, Any]], records.load([results]).records)


# --- without a cluster ---------------------------------------------------------------


def test_per_node_counts_and_placement() -> None:
    assert slurm.expand_counts("2(x3),1") == [2, 2, 2, 1]
    alloc = slurm.Allocation("7", (launch.Host("a", 2), launch.Host("b", 2)))
    assert [str(h) for h in alloc.placement(2)] == ["a:2"]  # fewest nodes first
    assert [str(h) for h in alloc.placement(4)] == ["a:2", "b:2"]
    with pytest.raises(slurm.SlurmError, match="5 workers do not fit in Slurm job 7"):
        alloc.placement(5)


@pytest.mark.skipif(shutil.which("srun") is None, reason="no srun: apt-get install slurm-wlm")
def test_two_node_cells_start_one_launcher_per_node(tmp_path: Path) -> None:
    alloc = slurm.Allocation("7", (launch.Host("a", 2), launch.Host("b", 2)), port=29511)
    ddp = engines.slurm_launch(Engine.DDP, alloc, 4, ["--x"], tag="t", log_dir=tmp_path)
    assert [n.host.name for n in ddp] == ["a", "b"]
    for rank, node in enumerate(ddp):
        argv = node.argv
        assert argv[argv.index("--nodelist") + 1] == node.host.name
        assert argv[argv.index("--cpus-per-task") + 1] == "2"  # the node's 2 workers
        assert argv[argv.index("--node-rank") + 1] == str(rank)
        assert argv[argv.index("--master-addr") + 1] == "a"
        assert argv[argv.index("--master-port") + 1] == "29511"
    paddle = engines.slurm_launch(Engine.PADDLE, alloc, 4, [], tag="t")
    assert [n.argv[n.argv.index("--host") + 1] for n in paddle] == ["a", "b"]
    (hvd,) = engines.slurm_launch(
        Engine.HOROVOD, alloc, 4, [], tag="t", options={"controller": "gloo"}
    )
    assert hvd.argv[hvd.argv.index("-H") + 1] == "a:2,b:2"
    assert hvd.argv[hvd.argv.index("--nodelist") + 1] == "a"
    # horovodrun reaches node b by ssh: with an ssh that starts it as a step of the job,
    # named like the cell's own, so that cancelling the cell stops b's workers too
    path = next(a for a in hvd.argv if a.startswith("PATH="))
    assert path.startswith(f"PATH={slurm.SSH_AS_SRUN}:")
    assert f"BENCH_SLURM_STEP={slurm.step_name('t')}" in hvd.argv
    assert not any(a.startswith("PATH=") for n in ddp for a in n.argv)  # ssh-free launchers
    assert engines.slurm_launch(Engine.DDP, alloc, 2, [], tag="t")[0].host.name == "a"  # one node


def test_submit_dry_run_prints_the_sbatch_script(tmp_path: Path) -> None:
    proc = run_bench(
        "run",
        "--submit",
        "--dry-run",
        "--engines",
        "ddp",
        "--workers",
        "1,2",
        *TINY,
        "--timeout",
        "60",
        "--sbatch-arg=--partition=gpu",
        "--sbatch-arg=--time=0:30:00",  # '=': argparse takes no value starting with '-' else
        "--results",
        str(tmp_path / "res"),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    script = proc.stdout
    assert script.startswith("#!/bin/bash\n")
    for line in ("--nodes=1", "--ntasks-per-node=2", "--partition=gpu", "--time=0:30:00"):
        assert f"#SBATCH {line}\n" in script
    assert script.count("#SBATCH --time") == 1  # the user's replaces the derived one
    (run_line,) = [line for line in script.splitlines() if line.startswith("exec ")]
    # the job runs the sweep from the parsed command, written as its config: nothing in
    # it can submit again
    commands = [line for line in script.splitlines() if not line.startswith("#")]
    assert not any("--submit" in line for line in commands) and "--sbatch-arg" not in run_line
    assert "--dry-run" not in run_line
    config = yaml.safe_load("\n".join(
        line[4:] for line in script.splitlines() if line.startswith("#   ")
    ))  # fmt: skip
    assert config["launcher"] == "slurm" and config["engines"] == ["ddp"]
    assert config["workers"] == [1, 2] and "submit" not in config
    assert f"--results {tmp_path / 'res'}" in run_line and " --config " in run_line
    assert not (tmp_path / "res").exists()  # printed, not written or submitted


def test_slurm_launcher_outside_an_allocation_is_refused(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["PATH"] = str(tmp_path)  # no srun either

    def run(*flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "bench", "run", *flags, "--engines", "ddp", *TINY,
             "--results", str(tmp_path / "res")],
            capture_output=True, text=True, timeout=300, cwd=ROOT, env=env,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip

    proc = run("--launcher", "slurm")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "SLURM_JOB_ID is not set: run bench inside salloc or an sbatch script" in proc.stderr
    env["SLURM_JOB_ID"] = "42"
    env["SLURM_JOB_NODELIST"] = "node1"
    proc = run()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "srun not found on PATH" in proc.stderr
    assert not (tmp_path / "res" / "runs.jsonl").exists()


# --- in a real cluster ------------------------------------------------------------------


@pytest.mark.distributed
def test_each_engine_runs_as_job_steps(cluster: slurm_cluster.SlurmCluster, tmp_path: Path) -> None:
    results = tmp_path / "res"
    # automatic inside an allocation: no --launcher; Gloo settings left in the shell
    # (srun exports them) must not switch the MPI step to Gloo
    stale = {"HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo"}
    proc = _in_allocation(
        cluster, 2, "--workers", "2", *TINY, "--results", str(results), extra_env=stale
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "cells run as job steps of Slurm job" in proc.stderr
    assert "(SLURM_JOB_ID is set; --launcher local runs them here instead)" in proc.stderr
    # Horovod through horovodrun --gloo in a step, as where Horovod has no MPI
    proc = _in_allocation(
        cluster,
        2,
        "--engines",
        "horovod",
        "--engine-option",
        "horovod:controller=gloo",
        "--workers",
        "2",
        *TINY,
        "--results",
        str(results),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    recs = _records(results)
    assert all(r["status"] == "ok" for r in recs), [r.get("error") for r in recs]
    by = {(r["engine"], r["knobs"].get("controller")): r for r in recs}
    mpi = "mpi" in horovod.built_controllers()
    want = {
        ("ddp", None),
        ("paddle", None),
        ("horovod", "gloo"),
        ("horovod", "mpi" if mpi else "gloo"),
    }
    assert set(by) == want
    ddp = by["ddp", None]
    for rec in recs:
        assert rec["world_size"] == 2
        assert rec["labels"]["slurm_job"] and rec["labels"]["hosts"] == f"{cluster.node}:2"
        assert rec["fingerprints"]["init_weights"] == ddp["fingerprints"]["init_weights"]
    for controller in ("gloo", "mpi") if mpi else ("gloo",):
        losses = np.asarray(by["horovod", controller]["step_losses"])
        assert losses.shape == np.asarray(ddp["step_losses"]).shape and losses.size >= 20
        np.testing.assert_allclose(losses, ddp["step_losses"], rtol=1e-6, err_msg=controller)
    if mpi:  # one srun --mpi=pmix step, no mpirun
        assert by["horovod", "mpi"]["launcher"]["name"] == "srun"
        assert by["horovod", "mpi"]["engine_options"] == {"controller": "mpi"}


@pytest.mark.distributed
def test_too_many_workers_for_the_allocation(
    cluster: slurm_cluster.SlurmCluster, tmp_path: Path
) -> None:
    proc = _in_allocation(
        cluster, 1, "--engines", "ddp", "--workers", "2", *TINY, "--results", str(tmp_path)
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "2 workers do not fit in Slurm job" in proc.stderr
    assert f"({cluster.node}:1: 1 tasks in all" in proc.stderr
    assert not records.results_file(tmp_path).exists()


@pytest.mark.distributed
def test_a_timed_out_step_leaves_no_process(
    cluster: slurm_cluster.SlurmCluster, tmp_path: Path
) -> None:
    results = tmp_path / "res"
    proc = _in_allocation(
        cluster,
        2,
        "--launcher",
        "slurm",
        "--engines",
        "ddp",
        "--workers",
        "2",
        *TINY,
        "--timeout",
        "20",
        "--results",
        str(results),
        # rank 0 stops itself at its first step: the cell hangs for certain, so it ends by
        # its time-out however fast this machine starts it
        extra_env={"BENCH_TEST_FAULT": "stall:rank=0,step=0"},
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (rec,) = _records(results)
    assert rec["status"] == "timeout"
    assert "cell exceeded its time-out of 20s" in rec["error"]
    # nothing of the cell is left: no step in Slurm, no worker on the machine
    steps = subprocess.run(
        ["squeue", "--steps", "--noheader"], env=cluster.environ(), capture_output=True, text=True
    ).stdout
    assert "bench-" not in steps
    left = [
        p.info["cmdline"]
        for p in psutil.process_iter(["cmdline"])
        if str(results) in " ".join(p.info["cmdline"] or [])
    ]
    assert not left, left


@pytest.mark.distributed
def test_submit_runs_the_sweep_as_a_batch_job(
    cluster: slurm_cluster.SlurmCluster, tmp_path: Path
) -> None:
    results = tmp_path / "res with a space"  # the #SBATCH --output path is quoted
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "run",
            "--submit",
            "--engines",
            "ddp",
            "--workers",
            "2",
            *TINY,
            "--timeout",
            "240",
            "--results",
            str(results),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=cluster.environ(),
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = proc.stdout.split("submitted Slurm job ")[1].split()[0]
    (script,) = (results / "slurm").glob("*.sbatch")
    assert "#SBATCH --ntasks-per-node=2\n" in script.read_text()
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        queued = subprocess.run(
            ["squeue", "--noheader", "--jobs", job],
            env=cluster.environ(),
            capture_output=True,
            text=True,
        ).stdout
        if not queued.strip():
            break
        time.sleep(2)
    else:
        pytest.fail(f"job {job} still queued or running after 600s\n{cluster.logs()}")
    output = results / "slurm" / f"slurm-{job}.out"
    text = output.read_text() if output.exists() else "(no output file)"
    recs = _records(results) if records.results_file(results).exists() else []
    assert len(recs) == 1, text
    assert recs[0]["status"] == "ok", text
    assert recs[0]["labels"]["slurm_job"] == job
    assert recs[0]["engine"] == Engine.DDP.value


@pytest.mark.distributed
def test_remote_workers_started_by_ssh_run_as_steps_and_are_cancelled(
    cluster: slurm_cluster.SlurmCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What horovodrun runs on another node through bench's ssh is a job step named for
    the cell, so `cancel_steps` reaches it (an ssh session would run outside the job)."""
    env = cluster.environ()
    monkeypatch.setenv("SLURM_CONF", env["SLURM_CONF"])
    out = subprocess.run(
        ["salloc", "--no-shell", "--ntasks", "1"], env=env, capture_output=True, text=True
    )
    job = out.stderr.split("Granted job allocation ")[1].split()[0]
    node = subprocess.run(
        ["squeue", "--noheader", "--jobs", job, "--format=%N"], env=env, capture_output=True,
        text=True,
    ).stdout.strip()  # fmt: skip
    marker = f"300.{uuid.uuid4().int % 10**6}"
    shim_env = {**env, "SLURM_JOB_ID": job, "BENCH_SLURM_STEP": slurm.step_name("shim")}
    # horovodrun's own spelling: options before and after the host, the command quoted
    ssh = [str(slurm.SSH_AS_SRUN / "ssh"), "-o", "PasswordAuthentication=no", "-o",
           "StrictHostKeyChecking=no", node, "-p", "22", f"cd /tmp > /dev/null 2>&1 ; sleep {marker}"]  # fmt: skip
    shim = subprocess.Popen(ssh, env=shim_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not _running(f"sleep {marker}") and time.monotonic() < deadline:
            assert shim.poll() is None, shim.stderr.read() if shim.stderr else ""
            time.sleep(0.2)
        assert _running(f"sleep {marker}"), "the remote command never started"
        assert slurm.cancel_steps(job, "shim").steps, "no step of the cell's name"
        deadline = time.monotonic() + 60
        while _running(f"sleep {marker}") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _running(f"sleep {marker}"), (
            "cancelling the cell's steps left the remote worker running"
        )
    finally:
        shim.kill()
        subprocess.run(["scancel", job], env=env, capture_output=True)


def _running(command: str) -> bool:
    """Whether a process runs exactly `command` (srun may spell the program as a path).

    Not a substring: srun's, ssh's and bash's own command lines contain the command too,
    and matching those said a task ran before srun had launched it."""
    want = command.split()
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        argv = line.split()
        if argv and [os.path.basename(argv[0]), *argv[1:]] == want:
            return True
    return False


def _allocate(env: dict[str, str]) -> tuple[str, Callable[[], list[str]]]:
    """A one-task allocation, and a function listing its steps named bench-t1."""
    out = subprocess.run(
        ["salloc", "--no-shell", "--ntasks", "1"], env=env, capture_output=True, text=True
    )
    job = out.stderr.split("Granted job allocation ")[1].split()[0]

    def steps() -> list[str]:
        out = subprocess.run(
            ["squeue", "--steps", "--jobs", job, "--noheader", "--format=%i %j"],
            env=env,
            capture_output=True,
            text=True,
        )
        return [line.split()[0] for line in out.stdout.splitlines() if "bench-t1" in line]

    return job, steps


def _srun(env: dict[str, str], job: str, command: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["srun", "--jobid", job, "--job-name", slurm.step_name("t1"), *command.split()],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@pytest.mark.distributed
def test_a_step_whose_srun_was_killed_is_cancelled(
    cluster: slurm_cluster.SlurmCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = cluster.environ()
    monkeypatch.setenv("SLURM_CONF", env["SLURM_CONF"])  # for cancel_steps' squeue and scancel
    job, steps = _allocate(env)
    task = f"sleep 300.{os.getpid()}"
    try:
        srun = _srun(env, job, task)
        deadline = time.monotonic() + 60
        while not _running(task) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _running(task), "the step's task never started"
        srun.kill()  # SIGKILL once the task runs: srun cannot end its step, which stays
        srun.wait()
        time.sleep(2)
        assert steps(), "the step ended with its srun: nothing left to test"
        cancelled = slurm.cancel_steps(job, "t1")
        assert cancelled.steps and not cancelled.stuck, cancelled
        assert not steps()
        assert not _running(task), "the step's task outlived its cancelled step"
    finally:
        subprocess.run(["scancel", job], env=env, capture_output=True)


@pytest.mark.distributed
def test_a_step_whose_srun_died_before_launch_is_named(
    cluster: slurm_cluster.SlurmCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """srun killed between creating its step and launching the task leaves a step that
    the controller keeps and no scancel ends: it is reported, with what to do."""
    env = cluster.environ()
    monkeypatch.setenv("SLURM_CONF", env["SLURM_CONF"])
    job, steps = _allocate(env)
    try:
        for _ in range(10):  # the window is a few milliseconds: try until srun dies in it
            srun = _srun(env, job, "sleep 300")
            deadline = time.monotonic() + 60
            while not steps() and time.monotonic() < deadline:
                pass
            srun.kill()
            srun.wait()
            # A step whose task was launched ends when cancelled: then try again.
            cancelled = slurm.cancel_steps(job, "t1", wait=10)
            if cancelled.stuck:
                break
        else:
            pytest.skip("srun never died between creating its step and launching it")
        assert cancelled.stuck == steps() == cancelled.steps
        note = cancelled.note(job)
        assert f"step {cancelled.stuck[0]} of job {job}" in note and f"scancel {job}" in note
    finally:
        subprocess.run(["scancel", job], env=env, capture_output=True)


def test_the_test_cluster_ends_its_own_leftover_stepds(tmp_path: Path) -> None:
    """The cluster's stop() kills a slurmstepd left by one of its steps (one outlived a
    full run once), and no other cluster's."""
    stepd = tmp_path / "slurmstepd"  # a stand-in with the daemon's process name
    shutil.copy("/bin/sleep", stepd)
    cluster = slurm_cluster.SlurmCluster(tmp_path, "vm", 2, [])
    ours, other = (
        subprocess.Popen([str(stepd), "300"], env={**os.environ, "SLURM_CONF": conf})
        for conf in (str(tmp_path / "slurm.conf"), "/elsewhere/slurm.conf")
    )
    try:
        cluster._kill_stepds()
        assert ours.wait(timeout=10) == -signal.SIGKILL
        assert other.poll() is None, "another cluster's stepd was killed"
    finally:
        for proc in (ours, other):
            proc.kill()
            proc.wait()
