"""The engine registry: everything the suite knows about each engine, in one place.

An engine is one adapter class (runners/engines/) plus one `EngineEntry` here: its
name, runner script, adapter import path, the module that must be installed and how
to get it, the one command builder that starts it on a cluster (this machine is a
one-host cluster), how its runner recognises the launcher, the engine options it
accepts, and the checks that refuse a run it cannot honour before anything starts.
`Engine`, the sweep's module checks, `check_engine` and the launch commands all
read it. This module imports no framework, so `bench run` can consult it before
launching.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import ClassVar

from bench import engine_options, launch
from bench.checks import InputError
from bench.spec import Device, GradCompression, Precision, RunSpec, SpecError

ROOT = Path(__file__).resolve().parent.parent


class _EngineType(type):
    """Iterating over `Engine` gives the registered engines in registration order."""

    def __iter__(cls) -> Iterator[Engine]:
        return iter([entry.engine for entry in _REGISTRY.values()])

    def __len__(cls) -> int:
        return len(_REGISTRY)


class Engine(str, metaclass=_EngineType):
    """A registered engine's name: `Engine("ddp")` is `Engine.DDP`; unknown names raise.

    A str like the enum it replaces (equal to its name, JSON-able as it, `.value`),
    but open: `register` adds an engine without editing this type. Instances are
    unique per name, so `is` compares them.
    """

    __slots__ = ()
    HOROVOD: ClassVar[Engine]
    DDP: ClassVar[Engine]
    PADDLE: ClassVar[Engine]

    def __new__(cls, name: object) -> Engine:
        entry = _REGISTRY.get(name) if isinstance(name, str) else None
        if entry is None:
            raise ValueError(f"{name!r} is not a valid Engine")
        return entry.engine

    @classmethod
    def _make(cls, name: str) -> Engine:
        return str.__new__(cls, name)

    @property
    def value(self) -> str:
        return str.__str__(self)

    def __repr__(self) -> str:
        return f"Engine({self.value!r})"


@dataclasses.dataclass(frozen=True)
class LaunchRequest:
    """What an engine's command builder gets: where, how many, and what to run."""

    cluster: launch.Cluster  # this machine is Cluster.this_machine(workers)
    workers: int
    script: str
    runner_args: tuple[str, ...]
    python: str
    log_dir: Path | None
    options: Mapping[str, str]  # the cell's engine options (Horovod's controller)

    def node_log(self, node_rank: int) -> Path | None:
        """The log folder of one host's launcher (the run's own on this machine)."""
        if self.log_dir is None or self.cluster.local:
            return self.log_dir
        return self.log_dir / f"node{node_rank}"


# Where a sweep's cells run, for `check_launch`: this machine, --hosts, Slurm job steps.
LOCAL, HOSTS, SLURM = "local", "hosts", "slurm"

# A builder returns each host's command: once per host (torchrun, Paddle), or once
# on the first host for launchers that start the other hosts' workers themselves.
Builder = Callable[[LaunchRequest], list[tuple[launch.Host, list[str]]]]


@dataclasses.dataclass(frozen=True)
class EngineEntry:
    """One engine as the suite knows it; see the module docstring."""

    name: str
    runner: Path  # the script its launcher starts on every worker
    adapter: str  # "package.module:Class", imported by the runner only
    module: str  # must be importable for the engine to run
    install_hint: str  # how to get `module`, said when it is missing
    launcher: str  # the launcher's name, as the record gives it
    build: Builder
    # Environment variables by which a worker recognises its launcher, with the name
    # the record gives it, checked in order (Horovod's MPI controller: mpirun).
    launched_by: tuple[tuple[str, str], ...]
    # name -> (kind, help); kinds in bench/engine_options.py
    options: Mapping[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    # options that conflict with each other, refused with SpecError
    check_option_set: Callable[[Mapping[str, str]], None] | None = None
    # settings of the shared spec this engine cannot honour, refused with InputError
    check_spec: Callable[[RunSpec], None] | None = None
    # what this machine must offer for the given options where the cell runs (LOCAL,
    # HOSTS or SLURM; e.g. an MPI build), refused with LaunchError before the sweep starts
    check_launch: Callable[[Mapping[str, str], str, str | None], None] | None = None
    engine: Engine = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "engine", Engine._make(self.name))

    @property
    def top_module(self) -> str:
        return self.module.split(".")[0]


_REGISTRY: dict[str, EngineEntry] = {}
_NAME = re.compile(r"[a-z][a-z0-9_]*")


def register(entry: EngineEntry) -> Engine:
    """Add an engine to the registry and return its `Engine`; a name is taken once."""
    if not _NAME.fullmatch(entry.name):
        raise ValueError(f"engine name {entry.name!r} must be lower-case letters, digits and _")
    if entry.name in _REGISTRY:
        raise ValueError(f"engine {entry.name!r} is already registered")
    _REGISTRY[entry.name] = entry
    return entry.engine


def unregister(engine: Engine | str) -> None:
    """Remove a registered engine (tests that register one remove it again)."""
    _REGISTRY.pop(str(engine), None)


def get(engine: Engine | str) -> EngineEntry:
    """The registry entry of `engine`; ValueError for a name not registered."""
    try:
        return _REGISTRY[str(engine)]
    except KeyError:
        raise ValueError(f"{str(engine)!r} is not a valid Engine; engines are: {names()}") from None


def names() -> str:
    """The registered engine names, comma separated (for help texts and errors)."""
    return ", ".join(_REGISTRY)


def check_options(engine: Engine, options: Mapping[str, str]) -> None:
    """Refuse unknown option names, values of the wrong kind and conflicts (SpecError)."""
    entry = get(engine)
    engine_options.check_declared(entry.name, entry.options, options)
    if entry.check_option_set is not None:
        entry.check_option_set(options)


def describe_options(engine: Engine) -> str:
    """The known options of `engine` with their help, for help texts and errors."""
    return engine_options.describe(get(engine).options)


def check_engine(engine: Engine, spec: RunSpec) -> None:
    """Settings one engine cannot honour, refused before anything starts (runner and sweep)."""
    entry = get(engine)
    if entry.check_spec is not None:
        entry.check_spec(spec)


def cannot_start(engine: Engine, exc: ImportError) -> InputError:
    """The error for an engine whose framework does not import (e.g. Horovod installed
    without its PyTorch extension), with the engine's own install hint."""
    return InputError(f"engine {engine.value} cannot start: {exc}; {get(engine).install_hint}")


def recognise_launcher(engine: Engine, env: Mapping[str, str]) -> str:
    """The launcher that started this worker: the engine's own first, then any other's."""
    own = get(engine).launched_by
    for variable, name in [*own, *(m for e in _REGISTRY.values() for m in e.launched_by)]:
        if variable in env:
            return name
    return "none"


def frameworks() -> tuple[str, ...]:
    """The top-level modules of every registered engine (they read thread variables)."""
    return tuple(dict.fromkeys(e.top_module for e in _REGISTRY.values()))


def build_launch(
    engine: Engine,
    cluster: launch.Cluster,
    workers: int,
    runner_args: list[str],
    *,
    log_dir: Path | None = None,
    python: str,
    script: Path | None = None,
    options: Mapping[str, str] | None = None,
) -> list[launch.NodeLaunch]:
    """The engine's launch of `workers` on `cluster`, one NodeLaunch per command to start.

    On this machine (`cluster.local`) the command runs as it is; on other hosts it
    is wrapped in the cluster's remote shell.
    """
    entry = get(engine)
    request = LaunchRequest(
        cluster=cluster,
        workers=workers,
        script=str(script or entry.runner),
        runner_args=tuple(runner_args),
        python=python,
        log_dir=log_dir,
        options=dict(options or {}),
    )
    out = []
    for host, command in entry.build(request):
        argv = command if cluster.local else cluster.remote(host, command)
        out.append(launch.NodeLaunch(host, argv, command))
    return out


# --- the built-in engines -------------------------------------------------------------


def _torchrun(req: LaunchRequest) -> list[tuple[launch.Host, list[str]]]:
    cluster, per = req.cluster, req.cluster.placement(req.workers)
    out = []
    for node_rank, host in enumerate(cluster.hosts):
        argv = [req.python, "-m", "torch.distributed.run"]
        if cluster.local:  # a free port of its own: concurrent runs do not collide
            argv += ["--standalone", "--nnodes", "1"]
        else:
            argv += ["--nnodes", str(len(cluster.hosts)), "--node-rank", str(node_rank)]
        argv += ["--nproc-per-node", str(per)]
        if not cluster.local:
            argv += ["--master-addr", cluster.master.name, "--master-port", str(cluster.port)]
        node_log = req.node_log(node_rank)
        if node_log is not None:
            argv += ["--log-dir", str(node_log), "--tee", "3"]
        out.append((host, [*argv, req.script, *req.runner_args]))
    return out


def _horovodrun(req: LaunchRequest) -> list[tuple[launch.Host, list[str]]]:
    cluster, per = req.cluster, req.cluster.placement(req.workers)
    try:
        controller = engine_options.horovod_controller(req.options)
    except SpecError as exc:
        raise launch.LaunchError(str(exc)) from None
    if controller not in ("gloo", "mpi"):
        raise launch.LaunchError(f"Horovod controller must be gloo or mpi, got {controller!r}")
    if controller != "gloo" and not cluster.local:
        raise launch.LaunchError(
            f"Horovod controller={controller} runs on one host only here; multi-node (--hosts) "
            "Horovod runs use the gloo controller: drop the controller option"
        )
    argv = [launch.horovodrun_path(req.python), "-np", str(req.workers)]
    argv += ["-H", ",".join(f"{h.name}:{per}" for h in cluster.hosts)]
    argv = [*(launch.mpi_root_env() if controller == "mpi" else []), *argv, f"--{controller}"]
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
    # The script is run through this Python, not its shebang, so the plan is exact;
    # horovodrun starts the other hosts' workers itself (by ssh) from the first host.
    return [(cluster.master, [*argv, req.python, req.script, *req.runner_args])]


def _paddle_launch(req: LaunchRequest) -> list[tuple[launch.Host, list[str]]]:
    cluster, per = req.cluster, req.cluster.placement(req.workers)
    out = []
    for node_rank, host in enumerate(cluster.hosts):
        argv = [req.python, "-m", "paddle.distributed.launch"]
        if not cluster.local:
            argv += ["--nnodes", str(len(cluster.hosts)), "--rank", str(node_rank)]
        argv += ["--nproc_per_node", str(per)]
        if not cluster.local:
            # --host: the address peers reach this node at; Paddle guesses it from the
            # host name otherwise, which is wrong on multi-homed machines.
            argv += ["--master", f"{cluster.master.name}:{cluster.port}", "--host", host.name]
        argv += ["--max_restart", "0"]  # a failed worker fails the run, not restarts it
        node_log = req.node_log(node_rank)
        if node_log is not None:
            argv += ["--log_dir", str(node_log)]
        out.append((host, [*argv, req.script, *req.runner_args]))
    return out


def _paddle_spec(spec: RunSpec) -> None:
    if not float(spec.bucket_mb).is_integer():
        raise InputError(
            f"bucket_mb={spec.bucket_mb}: paddle's DataParallel takes whole megabytes; "
            "use an integer"
        )
    if spec.device is Device.CPU and spec.precision is not Precision.FP32:
        raise InputError(
            f"precision={spec.precision.value} on CPU: paddle's auto_cast keeps its CPU "
            "kernels in fp32, so it would not run what torch runs; use fp32 on CPU, "
            "or device=cuda"
        )
    if spec.grad_compression is not GradCompression.NONE:
        raise InputError(
            f"grad_compression={spec.grad_compression.value}: paddle.DataParallel has no "
            "gradient compression; compare it with grad_compression=none"
        )


def _horovod_option_set(options: Mapping[str, str]) -> None:
    engine_options.horovod_controller(options)


def _horovod_launch(options: Mapping[str, str], where: str, python: str | None) -> None:
    """Refuse controller=mpi (or adasum=true) where this Horovod or machine cannot run it."""
    if engine_options.horovod_controller(options) != "mpi":
        return
    why = "adasum=true (Adasum runs over MPI)" if "controller" not in options else "controller=mpi"
    if where == HOSTS:
        raise launch.LaunchError(
            f"engine option {why} runs on one host only here; multi-node (--hosts) Horovod "
            "runs use the gloo controller"
        )
    built = launch.horovod_controllers(python)
    if "mpi" not in built:
        raise launch.LaunchError(
            f"engine option {why} needs Horovod built with MPI; this Horovod has "
            f"{', '.join(sorted(built)) or 'no controller'} only: install an MPI "
            "(apt-get install libopenmpi-dev openmpi-bin) and rerun scripts/setup.sh"
        )
    if where == SLURM:  # srun --mpi=pmix starts the workers, not mpirun
        from bench import slurm

        if "pmix" not in slurm.srun_mpi_types():
            raise launch.LaunchError(
                f"engine option {why} runs Horovod as srun --mpi=pmix steps, and this srun "
                f"offers {', '.join(sorted(slurm.srun_mpi_types())) or 'no MPI plugin'}: "
                "install Slurm's PMIx plugin (Debian: slurm-wlm-basic-plugins) or drop the option"
            )
    elif shutil.which("mpirun") is None:
        raise launch.LaunchError(
            f"engine option {why} needs mpirun on PATH (horovodrun --mpi starts the workers "
            "with it); install openmpi-bin or put your MPI's bin folder on PATH"
        )


RUNNERS = ROOT / "runners"
SETUP = "run scripts/setup.sh"

Engine.HOROVOD = register(
    EngineEntry(
        name="horovod",
        runner=RUNNERS / "hvd.py",
        adapter="runners.engines.torch_engines:HorovodAdapter",
        module="horovod.torch",
        install_hint=f"{SETUP}, which builds Horovod with PyTorch and Gloo support",
        launcher="horovodrun",
        build=_horovodrun,
        # OpenMPI's mpirun when horovodrun --mpi starts the workers through it; srun
        # when Slurm starts them as MPI tasks
        launched_by=(
            ("HOROVOD_RANK", "horovodrun"),
            ("OMPI_COMM_WORLD_RANK", "mpirun"),
            ("SLURM_STEP_ID", "srun"),  # a task of an srun --mpi=pmix step
        ),
        options=engine_options.HOROVOD,
        check_option_set=_horovod_option_set,
        check_launch=_horovod_launch,
    )
)
Engine.DDP = register(
    EngineEntry(
        name="ddp",
        runner=RUNNERS / "ddp.py",
        adapter="runners.engines.torch_engines:DDPAdapter",
        module="torch.distributed",
        install_hint=f"{SETUP} (installs torch)",
        launcher="torchrun",
        build=_torchrun,
        launched_by=(("TORCHELASTIC_RUN_ID", "torchrun"),),
    )
)
Engine.PADDLE = register(
    EngineEntry(
        name="paddle",
        runner=RUNNERS / "paddle_dp.py",
        adapter="runners.engines.paddle_engine:PaddleAdapter",
        module="paddle.distributed",
        install_hint=f"{SETUP} (installs paddlepaddle)",
        launcher="paddle.distributed.launch",
        build=_paddle_launch,
        launched_by=(("PADDLE_TRAINER_ID", "paddle.distributed.launch"),),
        check_spec=_paddle_spec,
    )
)
