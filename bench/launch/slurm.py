"""Slurm: cells as job steps of the current allocation, and sweeps submitted with sbatch.

Inside an allocation (`salloc`, or the script `sbatch` runs) every cell is started
with `srun` as job steps, each engine its own way: torchrun and Paddle's launcher
once per node (one single-node step each, with its node rank), Horovod as one MPI
step of all its workers (`srun --mpi=pmix`, the MPI controller) when this Horovod
has MPI and srun offers PMIx, else horovodrun --gloo in a step on the first node.
The hosts and their slots come from Slurm (SLURM_JOB_NODELIST expanded by
`scontrol show hostnames`, SLURM_TASKS_PER_NODE), never from a hostfile.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from bench.core.errors import SlurmError
from bench.core.units import minutes_hms
from bench.launch.cluster import ROOT, Host

# A folder holding an `ssh` that runs `ssh HOST COMMAND` as a job step of the current
# job (see the script): first on a launcher's PATH, its remote workers stay in the job.
SSH_AS_SRUN = Path(__file__).resolve().parent / "slurm_ssh"


@dataclasses.dataclass(frozen=True)
class Allocation:
    """The current Slurm job: its id, its nodes in order and the tasks each may run."""

    job_id: str
    hosts: tuple[Host, ...]
    cpus_per_task: int = 1
    port: int = 29400  # rendezvous port on the first node of a multi-node cell

    @property
    def slots(self) -> int:
        return sum(h.slots for h in self.hosts)

    def placement(self, workers: int) -> tuple[Host, ...]:
        """The fewest first nodes that hold `workers` spread evenly (as many on each)."""
        for n in range(1, len(self.hosts) + 1):
            per, rest = divmod(workers, n)
            if not rest and 1 <= per <= min(h.slots for h in self.hosts[:n]):
                return tuple(Host(h.name, per) for h in self.hosts[:n])
        raise SlurmError(
            f"{workers} workers do not fit in Slurm job {self.job_id} "
            f"({', '.join(map(str, self.hosts))}: {self.slots} tasks in all, as many per node "
            "as the node with the fewest); ask for fewer workers or a larger allocation "
            "(salloc --nodes N --ntasks-per-node M)"
        )


def expand_counts(text: str) -> list[int]:
    """Slurm's compressed per-node counts, '2(x3),1' -> [2, 2, 2, 1]."""
    out: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part)
        if not m:
            raise SlurmError(f"cannot read Slurm's per-node count {text!r} (expected e.g. 2(x3),1)")
        out += [int(m.group(1))] * int(m.group(2) or 1)
    return out


def _tool(name: str) -> str:
    found = shutil.which(name)
    if not found:
        raise SlurmError(
            f"{name} not found on PATH: --launcher slurm runs inside a Slurm allocation on a "
            "machine with Slurm's client commands (apt-get install slurm-client)"
        )
    return found


def allocation(environ: Mapping[str, str] | None = None) -> Allocation:
    """The allocation this process runs in, read from Slurm's variables and scontrol."""
    env = os.environ if environ is None else environ
    job = env.get("SLURM_JOB_ID", "")
    if not job:
        raise SlurmError(
            "--launcher slurm runs cells as job steps of a Slurm allocation, and SLURM_JOB_ID "
            "is not set: run bench inside salloc or an sbatch script, or use --submit"
        )
    srun = _tool("srun")
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    if not nodelist:
        raise SlurmError(f"Slurm job {job}: SLURM_JOB_NODELIST is not set; cannot find its nodes")
    argv = [str(Path(srun).with_name("scontrol")), "show", "hostnames", nodelist]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        raise SlurmError(f"cannot expand the node list ({shlex.join(argv)}): {exc}") from None
    names = out.stdout.split()
    # Tasks per node, as Slurm placed them; else the CPUs of each node.
    counts_text = (
        env.get("SLURM_TASKS_PER_NODE")
        or env.get("SLURM_NTASKS_PER_NODE")
        or env.get("SLURM_JOB_CPUS_PER_NODE")
        or env.get("SLURM_CPUS_ON_NODE")
        or "1"
    )
    counts = expand_counts(counts_text)
    if len(counts) == 1:
        counts *= len(names)
    if not names or len(counts) != len(names):
        raise SlurmError(
            f"Slurm job {job}: {len(names)} nodes ({nodelist}) but per-node task counts "
            f"{counts_text!r}; cannot place workers"
        )
    cpt = env.get("SLURM_CPUS_PER_TASK", "1")
    return Allocation(
        job,
        tuple(Host(n, c) for n, c in zip(names, counts, strict=True)),
        int(cpt) if cpt.isdigit() and int(cpt) > 0 else 1,
    )


@functools.cache
def srun_mpi_types() -> frozenset[str]:
    """The MPI plugin types `srun --mpi=list` offers (pmix, pmi2, none, ...)."""
    try:
        out = subprocess.run(
            [_tool("srun"), "--mpi=list"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    text = out.stdout + out.stderr
    return frozenset(re.findall(r"^\s*(?:srun: )?(\w+)\s*$", text, re.MULTILINE)) - {"are"}


def note(alloc: Allocation, explicit: bool) -> str:
    """The line `bench run` prints about running inside an allocation."""
    how = "" if explicit else " (SLURM_JOB_ID is set; --launcher local runs them here instead)"
    hosts = ", ".join(map(str, alloc.hosts))
    return f"bench run: cells run as job steps of Slurm job {alloc.job_id} on {hosts}{how}"


def step_name(tag: str) -> str:
    """The job-step name of one cell's steps, by which a left-over step is found."""
    return f"bench-{tag}"


def srun_argv(name: str, hosts: Sequence[Host], tasks_per_node: int, cpus: int) -> list[str]:
    """The `srun` prefix of one job step named `name` over `hosts`."""
    return [
        _tool("srun"),
        "--job-name",
        name,
        "--nodes",
        str(len(hosts)),
        "--nodelist",
        ",".join(h.name for h in hosts),
        "--ntasks",
        str(len(hosts) * tasks_per_node),
        "--ntasks-per-node",
        str(tasks_per_node),
        "--cpus-per-task",
        str(cpus),
        # one task failing ends the step, as a launcher ends its workers
        "--kill-on-bad-exit=1",
        "--unbuffered",
    ]


# How long a cancelled step may take to leave the controller's list of steps.
CANCEL_WAIT_S = 15.0


@dataclasses.dataclass(frozen=True)
class Cancelled:
    """The steps of one cell found after its srun ended, and those Slurm kept."""

    steps: list[str]
    stuck: list[str]

    def note(self, job_id: str) -> str:
        """What a user should know about the steps Slurm kept ('' when none)."""
        if not self.stuck:
            return ""
        return (
            f"bench run: Slurm still lists step {', '.join(self.stuck)} of job {job_id} "
            "after cancelling it (its srun died before its tasks were "
            "launched, so no node knows the step and no scancel ends it); later cells of "
            f"this job may wait for its CPUs until they time out: scancel {job_id} and "
            "resubmit to resume"
        )


def cancel_steps(job_id: str, tag: str, wait: float = CANCEL_WAIT_S) -> Cancelled:
    """Cancel any step of this job still named for `tag` (its srun was killed).

    The tasks get SIGKILL at once (`scancel --signal` goes straight to the nodes and
    leaves the controller's state alone), then the controller cancels the step, which
    ends a step whose tasks are gone but whose stepd never reported. A step whose srun
    died before launching anything stays listed whatever is done (Slurm 22.05): it is
    returned as stuck after `wait` seconds, with no process of ours behind it.
    """
    steps = _named_steps(job_id, tag)
    if not steps:
        return Cancelled([], [])
    with contextlib.suppress(SlurmError, OSError, subprocess.SubprocessError):
        scancel = _tool("scancel")
        for how in (["--signal=KILL"], []):
            subprocess.run([scancel, *how, *steps], capture_output=True, timeout=30)
    deadline = time.monotonic() + wait
    left = _named_steps(job_id, tag)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = _named_steps(job_id, tag)
    return Cancelled(steps, left)


def _named_steps(job_id: str, tag: str) -> list[str]:
    """The ids of this job's steps named for `tag`, as squeue lists them now."""
    try:
        out = subprocess.run(
            [_tool("squeue"), "--steps", "--jobs", job_id, "--noheader", "--format=%i %j"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (SlurmError, OSError, subprocess.SubprocessError):
        return []
    return [line.split()[0] for line in out.splitlines() if line.split()[1:] == [step_name(tag)]]


# --- sbatch ----------------------------------------------------------------------------


def sbatch_script(
    run_argv: Sequence[str],
    *,
    results: Path,
    workers: int,
    threads: int,
    cells: int,
    timeout: float,
    extra: Sequence[str] = (),
    python: str | None = None,
    cwd: Path | None = None,
) -> str:
    """The sbatch script of a sweep: #SBATCH lines from the sweep, then `bench run` in it.

    One node with as many tasks as the largest worker count, `threads` CPUs per task,
    and a time limit of every cell running to its time-out (plus 10 minutes); each
    `extra` (--sbatch-arg) option replaces the derived one of the same name or adds
    its own, so --sbatch-arg=--nodes=2 --sbatch-arg=--ntasks-per-node=4 spreads it.
    """
    derived = {
        "--job-name": "bench",
        "--nodes": "1",
        "--ntasks-per-node": str(workers),
        "--cpus-per-task": str(threads),
        "--time": minutes_hms(cells * timeout + 600),
        "--output": _directive_value(results / "slurm" / "slurm-%j.out"),
    }
    lines = dict(derived)
    for arg in extra:
        if not arg.startswith("-") or "\n" in arg:
            raise SlurmError(
                f"--sbatch-arg {arg!r} must be one sbatch option, e.g. --sbatch-arg=--partition=gpu"
            )
        key, sep, value = arg.partition("=")
        lines[key] = value if sep else ""
    header = "".join(f"#SBATCH {k}={v}\n" if v else f"#SBATCH {k}\n" for k, v in lines.items())
    python = python or sys.executable
    root = str(ROOT)
    return (
        "#!/bin/bash\n"
        + header
        + "# Written by `bench run --submit`: the sweep below runs as job steps of this job.\n"
        + "set -euo pipefail\n"
        + f"cd {shlex.quote(str(cwd or Path.cwd()))}\n"
        + f'export PYTHONPATH={shlex.quote(root)}"${{PYTHONPATH:+:$PYTHONPATH}}"\n'
        + "exec "
        + shlex.join([python, "-m", "bench", "run", *run_argv])
        + "\n"
    )


def _directive_value(path: Path) -> str:
    """A path as an #SBATCH value: in double quotes, which sbatch's own parser takes off,
    so that a space does not end it (sbatch has no escape for a double quote itself)."""
    text = str(path)
    if '"' in text or "\n" in text:
        raise SlurmError(
            f"results path {text!r} holds a double quote or a newline, which an #SBATCH "
            "line cannot carry; choose another --results"
        )
    return f'"{text}"'


def submit(script: str, results: Path, stem: str | None = None) -> tuple[str, Path]:
    """Write the script under results/slurm/ (as STEM.sbatch) and submit it; (job id, path)."""
    sbatch = shutil.which("sbatch")
    if not sbatch:
        raise SlurmError(
            "sbatch not found on PATH: --submit needs Slurm's client commands on this "
            "machine (apt-get install slurm-client), or use --dry-run to print the script"
        )
    folder = results / "slurm"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        stem = stem or f"sweep-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        path = folder / f"{stem}.sbatch"
        path.write_text(script)
    except OSError as exc:
        raise SlurmError(f"cannot write the sbatch script under {folder}: {exc.strerror}") from None
    try:
        out = subprocess.run(
            [sbatch, "--parsable", str(path)], capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise SlurmError(f"sbatch {path} failed: {exc}") from None
    if out.returncode != 0:
        raise SlurmError(f"sbatch {path} failed: {(out.stderr or out.stdout).strip()}")
    return out.stdout.strip().split(";")[0], path
