"""Horovod (PyTorch backend): started by horovodrun, which reaches other hosts by ssh.

Its quirks, all here: the Gloo or MPI controller (Adasum needs MPI), a build that
may lack MPI, OpenMPI refusing to start as root, one launcher on the first host
starting every worker, a Slurm recipe of its own (one `srun --mpi=pmix` step of
every worker when it has MPI), and its timeline as a trace option.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from bench.core.errors import LaunchError, SpecError
from bench.engines.options import Option
from bench.engines.registry import (
    RUNNERS,
    SETUP,
    EngineEntry,
    LaunchRequest,
    SlurmRequest,
    Where,
)
from bench.launch import slurm
from bench.launch.cluster import Host, NodeLaunch

OPTIONS: Mapping[str, Option] = {
    "controller": Option(
        "choice",
        "gloo|mpi: horovodrun --gloo or --mpi (mpi needs Horovod built with MPI); "
        "default gloo, mpi with adasum=true",
        ("gloo", "mpi"),
    ),
    "timeline": Option(
        "path", "PATH: write Horovod's timeline there and summarise it in the record"
    ),
    "autotune": Option("bool", "true|false: Horovod autotuning of fusion threshold and cycle time"),
    "adasum": Option(
        "bool", "true|false: Adasum gradient reduction instead of averaging (over MPI)"
    ),
    "cycle_time_ms": Option("number", "MS: Horovod's cycle time"),
    "comm_timeline": Option(
        "bool",
        "true|false: arm Horovod's dynamic timeline so the profiled steps measure its "
        "communication (hidden comm); it slowed the timed steps by about 20% here",
    ),
}


# the controller unless an option says otherwise, which a variant's name leaves unsaid
DEFAULT_CONTROLLER = "gloo"


def controller(options: Mapping[str, str]) -> str:
    """The controller a Horovod run starts with: `controller`, else mpi for Adasum, else gloo.

    Horovod's CPU Adasum reduces over MPI only (under the Gloo controller it has no
    Adasum operation), so adasum=true implies the MPI controller and refuses gloo.
    """
    adasum = options.get("adasum", "false").lower() == "true"
    chosen = options.get("controller", "mpi" if adasum else DEFAULT_CONTROLLER)
    if adasum and chosen != "mpi":
        raise SpecError(
            "engine option adasum=true needs controller=mpi (Horovod's Adasum reduces over "
            f"MPI), got controller={chosen}; drop controller or set it to mpi"
        )
    return chosen


# How a worker tells that an MPI launcher started it: horovodrun's MPI mode, plain
# mpirun and `srun --mpi=pmix` set one of these, and none sets HOROVOD_CONTROLLER (only
# horovodrun's Gloo mode does), so Horovod must be told to use MPI, or each worker
# would start a Gloo controller with no rendezvous and train alone.
MPI_LAUNCHERS = (
    ("OMPI_COMM_WORLD_SIZE", "mpirun"),
    ("PMIX_RANK", "srun --mpi=pmix"),
    ("PMI_SIZE", "an MPI launcher (PMI)"),
)


def resolve_controller(options: Mapping[str, str], env: Mapping[str, str]) -> tuple[str, str]:
    """The controller a worker starts with and who chose it: the launcher, else an option.

    The launcher decides where it announced one (horovodrun's Gloo mode sets
    HOROVOD_CONTROLLER; an MPI launcher implies mpi); an option that contradicts it is a
    SpecError naming both and the launch to use instead. Without a launcher (a worker
    run by hand) the options decide (`controller`). Returns (controller, chosen by):
    "launcher:<name>", "environment" (HOROVOD_CONTROLLER set outside a launcher),
    "option" or "default".
    """
    wanted = controller(options)
    asked = "controller" in options or "adasum" in options
    said = env.get("HOROVOD_CONTROLLER", "").lower()
    mpi_by = next((name for var, name in MPI_LAUNCHERS if var in env), None)
    if said:
        if said not in ("gloo", "mpi"):
            raise SpecError(f"HOROVOD_CONTROLLER={said!r}: Horovod's controllers are gloo and mpi")
        if "HOROVOD_RANK" in env:
            by = "launcher:horovodrun"
        elif said == "mpi" and mpi_by:
            by = f"launcher:{mpi_by}"
        else:
            by = "environment"
        if said == "gloo" and mpi_by and "HOROVOD_GLOO_RENDEZVOUS_ADDR" not in env:
            raise SpecError(
                f"HOROVOD_CONTROLLER=gloo in the environment, but {mpi_by} started this worker "
                "and Gloo has no rendezvous under it: unset HOROVOD_CONTROLLER, or launch with "
                "horovodrun --gloo"
            )
    elif mpi_by:
        said, by = "mpi", f"launcher:{mpi_by}"
    else:
        return wanted, "option" if asked else "default"
    if asked and wanted != said:
        why = f"controller={wanted}"
        if "controller" not in options:
            why = "adasum=true (which runs over MPI)"
        started = by.removeprefix("launcher:") if by != "environment" else "HOROVOD_CONTROLLER"
        raise SpecError(
            f"engine option {why} contradicts {started}, which started this worker for the "
            f"{said} controller: launch with horovodrun --{wanted}, or drop the option"
        )
    return said, by


def horovodrun_path(python: str) -> str:
    """horovodrun beside `python`, else on PATH; LaunchError naming the fix when absent."""
    beside = Path(python).parent / "horovodrun"
    if beside.exists():
        return str(beside)
    found = shutil.which("horovodrun")
    if not found:
        raise LaunchError(
            "horovodrun not found next to the Python in use nor on PATH; run scripts/setup.sh, "
            "which builds and installs Horovod into .venv"
        )
    return found


@functools.cache
def built_controllers(python: str | None = None) -> frozenset[str]:
    """The controllers ("gloo", "mpi") the Horovod beside `python` was built with.

    Asked of `horovod.torch` in a child process (`mpi_built()`, `gloo_built()`, the
    flags `horovodrun --check-build` prints too), so that it is known before anything
    launches and without importing torch here: 2.5 s on this machine, where
    `horovodrun --check-build` takes 13 s probing every framework. Once per interpreter.
    """
    horovodrun_path(python or sys.executable)  # no launcher, no Horovod run: say so first
    code = (
        "import horovod.torch as h; "
        "print(*[n for n, b in (('gloo', h.gloo_built()), ('mpi', h.mpi_built())) if b])"
    )
    argv = [python or sys.executable, "-c", code]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=True).stdout
    except subprocess.CalledProcessError as exc:
        why = (exc.stderr or "").strip().splitlines()[-1:] or [f"exit code {exc.returncode}"]
        raise LaunchError(f"cannot read Horovod's build (import horovod.torch): {why[0]}") from None
    except (OSError, subprocess.SubprocessError) as exc:
        raise LaunchError(f"cannot read Horovod's build ({argv[0]}): {exc}") from None
    return frozenset(out.split())


def mpi_root_env() -> list[str]:
    """`env` prefix that lets OpenMPI start as root: it refuses to otherwise."""
    if os.geteuid() != 0:
        return []
    return ["env", "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"]


def horovodrun(req: LaunchRequest) -> list[tuple[Host, list[str]]]:
    """horovodrun once, on the first host; it starts the other hosts' workers by ssh."""
    cluster, per = req.cluster, req.cluster.placement(req.workers)
    try:
        chosen = controller(req.options)
    except SpecError as exc:
        raise LaunchError(str(exc)) from None
    if chosen != "gloo" and not cluster.local:
        raise LaunchError(
            f"Horovod controller={chosen} runs on one host only here; multi-node (--hosts) "
            "Horovod runs use the gloo controller: drop the controller option"
        )
    argv = [horovodrun_path(req.python), "-np", str(req.workers)]
    argv += ["-H", ",".join(f"{h.name}:{per}" for h in cluster.hosts)]
    argv = [*(mpi_root_env() if chosen == "mpi" else []), *argv, f"--{chosen}"]
    if cluster.iface:
        argv += ["--network-interfaces", cluster.iface]
    if cluster.ssh_port:
        argv += ["--ssh-port", str(cluster.ssh_port)]
    if cluster.ssh_identity:
        argv += ["--ssh-identity-file", cluster.ssh_identity]
    # Horovod 0.28.1's --output-filename crashes at -np 1 (log10(0) in _pad_rank);
    # one rank's output is the launcher's own, which the caller captures anyway.
    if req.log_dir is not None and req.workers > 1:
        argv += ["--output-filename", str(req.log_dir)]
    # The script is run through this Python, not its shebang, so the plan is exact.
    return [(cluster.master, [*argv, req.python, req.script, *req.runner_args])]


def check_option_set(options: Mapping[str, str]) -> None:
    controller(options)


def check_launch(options: Mapping[str, str], where: Where, python: str | None) -> None:
    """Refuse controller=mpi (or adasum=true) where this Horovod or machine cannot run it."""
    if controller(options) != "mpi":
        return
    why = "adasum=true (Adasum runs over MPI)" if "controller" not in options else "controller=mpi"
    if where is Where.HOSTS:
        raise LaunchError(
            f"engine option {why} runs on one host only here; multi-node (--hosts) Horovod "
            "runs use the gloo controller"
        )
    built = built_controllers(python)
    if "mpi" not in built:
        raise LaunchError(
            f"engine option {why} needs Horovod built with MPI; this Horovod has "
            f"{', '.join(sorted(built)) or 'no controller'} only: install an MPI "
            "(apt-get install libopenmpi-dev openmpi-bin) and rerun scripts/setup.sh"
        )
    if where is Where.SLURM:  # srun --mpi=pmix starts the workers, not mpirun
        if "pmix" not in slurm.srun_mpi_types():
            raise LaunchError(
                f"engine option {why} runs Horovod as srun --mpi=pmix steps, and this srun "
                f"offers {', '.join(sorted(slurm.srun_mpi_types())) or 'no MPI plugin'}: "
                "install Slurm's PMIx plugin (Debian: slurm-wlm-basic-plugins) or drop the option"
            )
    elif shutil.which("mpirun") is None:
        raise LaunchError(
            f"engine option {why} needs mpirun on PATH (horovodrun --mpi starts the workers "
            "with it); install openmpi-bin or put your MPI's bin folder on PATH"
        )


def slurm_recipe(req: SlurmRequest) -> list[NodeLaunch] | None:
    """With the MPI controller, one `srun --mpi=pmix` step of every worker (no mpirun:
    Horovod initialises MPI through Slurm's PMIx); over Gloo, the generic recipe
    (horovodrun in a step on the first node, reaching the others itself)."""
    if controller(req.options) != "mpi":
        return None
    if "pmix" not in slurm.srun_mpi_types():
        raise slurm.SlurmError(
            "Horovod with controller=mpi runs as srun --mpi=pmix steps, and this srun offers "
            f"no pmix plugin ({', '.join(sorted(slurm.srun_mpi_types())) or 'none'}); install "
            "Slurm's PMIx plugin or use controller=gloo"
        )
    per = req.hosts[0].slots
    argv = [*req.srun(req.hosts, per, req.threads), "--mpi=pmix", "--label"]
    # The MPI controller and MPI CPU operations are what an MPI build uses under mpirun
    # (as horovodrun's MPI mode runs them); said explicitly, so that a HOROVOD_* variable in the caller's shell (srun exports
    # it) cannot switch the step to Gloo.
    command = [
        "env",
        "HOROVOD_CONTROLLER=mpi",
        "HOROVOD_CPU_OPERATIONS=mpi",
        req.python,
        str(req.runner),
        *req.runner_args,
    ]
    return [NodeLaunch(req.hosts[0], [*argv, *command], command)]


def slurm_options(options: tuple[str, ...], python: str | None) -> tuple[str, ...]:
    """Horovod's options in Slurm: the MPI controller (srun --mpi=pmix) unless one was chosen.

    Recorded as controller=mpi, so compare shows these runs as horovod[mpi]. Without
    Horovod, MPI in it, or PMIx in srun, they stay on Gloo (horovodrun).
    """
    given = dict(o.partition("=")[::2] for o in options)
    if "controller" in given or "adasum" in given or importlib.util.find_spec("horovod") is None:
        return options
    try:
        mpi = "mpi" in built_controllers(python) and "pmix" in slurm.srun_mpi_types()
    except LaunchError:
        return options
    return (*options, "controller=mpi") if mpi else options


ENTRY = EngineEntry(
    name="horovod",
    runner=RUNNERS / "hvd.py",
    adapter="runners.adapters.horovod_engine:HorovodAdapter",
    module="horovod.torch",
    install_hint=f"{SETUP}, which builds Horovod with PyTorch and Gloo support",
    launcher="horovodrun",
    build=horovodrun,
    # OpenMPI's mpirun when horovodrun --mpi starts the workers through it; srun when
    # Slurm starts them as MPI tasks
    launched_by=(
        ("HOROVOD_RANK", "horovodrun"),
        ("OMPI_COMM_WORLD_RANK", "mpirun"),
        ("SLURM_STEP_ID", "srun"),  # a task of an srun --mpi=pmix step
    ),
    world_from=(("HOROVOD_SIZE", "HOROVOD_RANK"),),  # horovodrun's Gloo mode
    options=OPTIONS,
    check_option_set=check_option_set,
    check_launch=check_launch,
    slurm_recipe=slurm_recipe,
    slurm_options=slurm_options,
    needs_ssh=True,
    # hvd.synchronize (WaitAndClear in horovod/torch/mpi_ops_v2.cc) polls the handle and
    # yields in a loop until the background thread has reduced the tensor
    waits_spin=True,
    trace_option=lambda log_dir: f"timeline={log_dir / 'timeline.json'}",
    trace_flag="--hvd-timeline",
    variant_options={"controller": DEFAULT_CONTROLLER},
    comm_knobs="a larger --bucket-mb (Horovod's fusion threshold), the engine option "
    "horovod:cycle_time_ms, or --grad-compression fp16",
    # the cycle time is an engine option (None: Horovod's own default)
    tune_grid=tuple(
        {"bucket_mb": b, "cycle_time_ms": c} for b in (4.0, 25.0, 100.0) for c in (None, 10.0)
    ),
    colour="#1f77b4",
    line=("-", "o"),
)
