"""The engine registry: everything the suite knows about each engine, in one place.

An engine is one adapter class (runners/adapters/) plus one `EngineEntry`: its
name, runner script, adapter import path, the module that must be installed and
how to get it, the one command builder that starts it on a cluster (this machine
is a one-host cluster), how its runner recognises the launcher, the engine
options it accepts, the checks that refuse a run it cannot honour before
anything starts, and each of its quirks as a field (its own Slurm recipe, its
need for ssh between hosts, its trace option, its colour in plots). Everything
else asks the registry; nothing outside an entry branches on an engine's name.
This module imports no framework, so `bench run` can consult it before launching.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import ClassVar

from bench.contract.spec import RunSpec
from bench.core.errors import InputError, LaunchError
from bench.engines import options as engine_options
from bench.launch import slurm
from bench.launch.cluster import ROOT, Cluster, Host, NodeLaunch

RUNNERS = ROOT / "runners"
SETUP = "run scripts/setup.sh"


class _EngineType(type):
    """Iterating over `Engine` gives the registered engines in registration order."""

    def __iter__(cls) -> Iterator[Engine]:
        return iter([entry.engine for entry in _REGISTRY.values()])

    def __len__(cls) -> int:
        return len(_REGISTRY)


class Engine(str, metaclass=_EngineType):
    """A registered engine's name: `Engine("ddp")` is `Engine.DDP`; unknown names raise.

    It behaves as a str Enum member would (equal to its name, JSON-able as it,
    `.value`), so records and callers need no encoder or conversion, but it is open:
    `register` adds an engine without editing this type. Instances are unique per
    name, so `is` compares them.
    """

    __slots__ = ()
    HOROVOD: ClassVar[Engine]
    DDP: ClassVar[Engine]
    PADDLE: ClassVar[Engine]

    def __new__(cls, name: object) -> Engine:
        entry = _REGISTRY.get(name) if isinstance(name, str) else None
        if entry is None:
            # the registered names are added once, by whoever reports it (names())
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


class Where(enum.StrEnum):
    """Where a sweep's cells run, for an engine's pre-launch checks."""

    LOCAL = "local"  # this machine
    HOSTS = "hosts"  # --hosts / --hostfile, reached by a remote shell
    SLURM = "slurm"  # job steps of a Slurm allocation


@dataclasses.dataclass(frozen=True)
class LaunchRequest:
    """What an engine's command builder gets: where, how many, and what to run."""

    cluster: Cluster  # this machine is Cluster.this_machine(workers)
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


@dataclasses.dataclass(frozen=True)
class SlurmRequest:
    """A cell as job steps: the allocation's hosts it was placed on, and what to run."""

    hosts: tuple[Host, ...]  # the nodes the cell uses, each with its workers
    srun: Callable[[tuple[Host, ...], int, int], list[str]]  # (hosts, tasks/node, cpus/task)
    threads: int  # CPUs per task of the allocation
    runner: Path
    runner_args: tuple[str, ...]
    python: str
    options: Mapping[str, str]


# A builder returns each host's command: once per host (torchrun, Paddle), or once
# on the first host for launchers that start the other hosts' workers themselves.
Builder = Callable[[LaunchRequest], list[tuple[Host, list[str]]]]
# An engine's own Slurm recipe for the cell, or None for the generic one (its
# launcher in one step per node).
SlurmRecipe = Callable[[SlurmRequest], list[NodeLaunch] | None]


def _no_options(options: tuple[str, ...], python: str | None) -> tuple[str, ...]:
    return options


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
    # Environment variables by which its own launchers announce the world a worker
    # joins, (size, rank), checked in order before the generic ones (GENERIC_WORLDS):
    # the runner refuses a world of another size.
    world_from: tuple[tuple[str, str], ...] = ()
    options: engine_options.Declared = dataclasses.field(default_factory=dict)
    # options that conflict with each other, refused with SpecError
    check_option_set: Callable[[Mapping[str, str]], None] | None = None
    # settings of the shared spec this engine cannot honour, refused with InputError
    check_spec: Callable[[RunSpec], None] | None = None
    # what this machine must offer for the given options where the cell runs (e.g. an
    # MPI build), refused with LaunchError before the sweep starts
    check_launch: Callable[[Mapping[str, str], Where, str | None], None] | None = None
    # its own way to run a cell as Slurm job steps (None: the generic way)
    slurm_recipe: SlurmRecipe | None = None
    # the options its cells take by default inside an allocation
    slurm_options: Callable[[tuple[str, ...], str | None], tuple[str, ...]] = _no_options
    # its launcher starts the other hosts' workers by ssh (emulated links start an sshd)
    needs_ssh: bool = False
    # its training step waits for a collective by polling, not by blocking: on cores
    # shared by more threads the wait keeps taking CPU (bench predict's sharing point)
    waits_spin: bool = False
    # threads per worker it keeps busy beside compute while it communicates (Gloo's
    # worker thread, Horovod's background thread, Paddle's): what advice counts against
    # the CPUs before suggesting more threads or workers
    comm_threads: int = 1
    # its collectives run synchronously inside backward, so none of their time can be
    # hidden behind computation (Paddle's allreduce over Gloo)
    comm_inside_backward: bool = False
    # the option that makes it write its own trace into a cell's log folder, or None
    # where it has none
    trace_option: Callable[[Path], str] | None = None
    # the `bench run` flag its users know for those traces (`--hvd-timeline`); it
    # turns on every engine's trace_option
    trace_flag: str | None = None
    # options its variant names bare when they are not at this default, as compare shows
    # them (`horovod[mpi]`): read from what ran (the record's knobs) before what was asked
    variant_options: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # Communication knobs that leave the maths unchanged: what a communication-bound
    # verdict suggests, and the grid `bench tune` searches (each point: bucket_mb and
    # engine options; an option's None is the engine's own default)
    comm_knobs: str = "a larger --bucket-mb"
    tune_grid: tuple[dict[str, float | None], ...] = ({"bucket_mb": 5.0}, {"bucket_mb": 100.0})
    # its colour, line style and marker in the HTML report's figures (None: a spare one)
    colour: str | None = None
    line: tuple[object, str] = ("-", "D")
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
        raise ValueError(f"{str(engine)!r} is not a valid Engine") from None


def waits_spin(engine: str) -> bool:
    """Whether `engine`'s waits take CPU (`EngineEntry.waits_spin`); False when unknown,
    as for records of an engine no longer registered."""
    entry = _REGISTRY.get(engine)
    return entry is not None and entry.waits_spin


def variant_options(engine: str) -> Mapping[str, str]:
    """`EngineEntry.variant_options` of `engine`; none when unknown, as for records of an
    engine no longer registered."""
    entry = _REGISTRY.get(engine)
    return entry.variant_options if entry is not None else {}


def trace_flags() -> list[str]:
    """The `bench run` flags that keep every engine's own trace (`EngineEntry.trace_flag`)."""
    return sorted({e.trace_flag for e in _REGISTRY.values() if e.trace_flag})


def names() -> str:
    """The registered engine names, comma separated (for help texts and errors)."""
    return ", ".join(_REGISTRY)


def unknown(name: object) -> str:
    """The one wording of an unknown engine, for every command and config file alike:
    the name, the closest registered one if any, and the registered names."""
    close = difflib.get_close_matches(name, list(_REGISTRY), n=1) if isinstance(name, str) else []
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"unknown engine {name!r}{hint}; engines are: {names()}"


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


# Launchers that start every worker themselves, for any engine: a runner they start
# without its engine's own launcher must not train alone in each process.
GENERIC_WORLDS = (
    ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"),  # OpenMPI's mpirun (horovodrun --mpi)
    ("PMI_SIZE", "PMI_RANK"),  # MPICH's and Intel MPI's launchers
    ("SLURM_STEP_NUM_TASKS", "SLURM_PROCID"),  # srun (a step of N tasks)
)


@dataclasses.dataclass(frozen=True)
class Announced:
    """The world a launcher announced to a worker, before the engine starts."""

    size: int
    rank: int | None  # None where the launcher gave no rank variable
    variable: str  # where the size came from, for messages (`OMPI_COMM_WORLD_SIZE`)


def announced_world(engine: Engine, env: Mapping[str, str]) -> Announced | None:
    """What the launcher of this worker announced (`EngineEntry.world_from`, then the
    generic launchers), or None when nothing did (a worker started by hand is a world of
    one)."""
    for size_var, rank_var in (*get(engine).world_from, *GENERIC_WORLDS):
        if size_var not in env:
            continue
        try:
            size = int(env[size_var])
            rank = int(env[rank_var]) if rank_var in env else None
        except ValueError:
            raise InputError(
                f"{size_var}={env[size_var]!r} / {rank_var}={env.get(rank_var)!r}: the "
                "launcher's world size and rank must be integers"
            ) from None
        if size < 1:
            raise InputError(f"{size_var}={size}: the launcher announced an empty world")
        return Announced(size, rank, size_var)
    return None


def frameworks() -> tuple[str, ...]:
    """The top-level modules of every registered engine (they read thread variables)."""
    return tuple(dict.fromkeys(e.top_module for e in _REGISTRY.values()))


def build_launch(
    engine: Engine,
    cluster: Cluster,
    workers: int,
    runner_args: list[str],
    *,
    log_dir: Path | None = None,
    python: str | None = None,
    script: Path | None = None,
    options: Mapping[str, str] | None = None,
) -> list[NodeLaunch]:
    """The engine's launch of `workers` on `cluster`, one NodeLaunch per command to start.

    On this machine (`cluster.local`) the command runs as it is; on other hosts it
    is wrapped in the cluster's remote shell. Single-node is the one-host cluster.
    """
    entry = get(engine)
    request = LaunchRequest(
        cluster=cluster,
        workers=workers,
        script=str(script or entry.runner),
        runner_args=tuple(runner_args),
        python=python or sys.executable,
        log_dir=log_dir,
        options=dict(options or {}),
    )
    out = []
    for host, command in entry.build(request):
        argv = command if cluster.local else cluster.remote(host, command)
        out.append(NodeLaunch(host, argv, command))
    return out


def local_argv(
    engine: Engine,
    workers: int,
    runner_args: list[str],
    *,
    log_dir: Path | None = None,
    python: str | None = None,
    script: Path | None = None,
    options: Mapping[str, str] | None = None,
) -> list[str]:
    """The argv that starts `workers` of `engine` on this machine with its own launcher."""
    if workers < 1:
        raise LaunchError(f"number of workers must be >= 1, got {workers}")
    cluster = Cluster.this_machine(workers)
    (node,) = build_launch(
        engine,
        cluster,
        workers,
        runner_args,
        log_dir=log_dir,
        python=python,
        script=script,
        options=options,
    )
    return node.argv


def slurm_launch(
    engine: Engine,
    alloc: slurm.Allocation,
    workers: int,
    runner_args: list[str],
    *,
    tag: str,
    log_dir: Path | None = None,
    python: str | None = None,
    options: Mapping[str, str] | None = None,
) -> list[NodeLaunch]:
    """The cell as job steps of `alloc`: the engine's own recipe, else the generic one.

    Generic: its launcher as one single-node step per node, started together, with
    the node's rank and the first node as rendezvous (its multi-node launch, with
    srun in place of the remote shell); the launcher process is one task holding
    every CPU of its node's workers.
    """
    entry = get(engine)
    hosts = alloc.placement(workers)
    python = python or sys.executable
    name = slurm.step_name(tag)

    def srun(on: tuple[Host, ...], tasks: int, cpus: int) -> list[str]:
        return slurm.srun_argv(name, on, tasks, cpus)

    if entry.slurm_recipe is not None:
        request = SlurmRequest(
            hosts=hosts,
            srun=srun,
            threads=alloc.cpus_per_task,
            runner=entry.runner,
            runner_args=tuple(runner_args),
            python=python,
            options=dict(options or {}),
        )
        own = entry.slurm_recipe(request)
        if own is not None:
            return own
    # One node: the launcher's single-node form (torchrun --standalone picks a free
    # port; horovodrun starts local workers itself only for names it knows as local).
    one = len(hosts) == 1
    cluster = Cluster.this_machine(workers) if one else Cluster(hosts, port=alloc.port)
    nodes = build_launch(
        engine, cluster, workers, runner_args, log_dir=log_dir, python=python, options=options
    )
    per, threads = hosts[0].slots, alloc.cpus_per_task
    prefix = _ssh_as_steps(name, per * threads) if entry.needs_ssh and not one else []
    return [
        NodeLaunch(
            host,
            [*srun((host,), 1, per * threads), "--mpi=none", *prefix, *node.command],
            [*prefix, *node.command],
        )
        for host, node in zip(hosts, nodes, strict=False)
    ]


def _ssh_as_steps(name: str, cpus: int) -> list[str]:
    """`env` prefix for a launcher that starts the other nodes' workers by ssh: an ssh
    that runs them as steps of this job, named like the cell's (`name`), so that
    cancelling the cell stops them."""
    path = f"{slurm.SSH_AS_SRUN}:{os.environ.get('PATH', os.defpath)}"
    return ["env", f"PATH={path}", f"BENCH_SLURM_STEP={name}", f"BENCH_SLURM_CPUS={cpus}"]
