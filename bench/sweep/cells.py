"""A sweep's cells: engines x workers x models x repeats, each checked before any runs."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import json
from collections.abc import Sequence

import models
from bench import engines
from bench.contract.data import outline
from bench.contract.identity import CELL_FIELDS_V1, canonical
from bench.contract.prepare import check_device, prepare
from bench.contract.spec import Device, RunSpec
from bench.core import machine
from bench.core.errors import InputError, LaunchError, SweepError
from bench.core.units import format_rate
from bench.engines import Engine, Where
from bench.launch import netns, slurm
from bench.launch.cluster import Cluster
from bench.sweep.config import SLURM, SweepConfig


@dataclasses.dataclass(frozen=True)
class Cell:
    engine: Engine
    workers: int
    spec: RunSpec
    repeat: int
    seed_mode: str
    options: tuple[str, ...] = ()  # engine options KEY=VALUE for this cell's engine
    cluster: Cluster | None = None  # None: this machine
    # runner flags for how the run measures; they change no trained number, so not the key
    measure: tuple[str, ...] = ()
    link_bps: int | None = None  # the emulated link's rate (bench/netns.py); None: none
    allocation: slurm.Allocation | None = None  # job steps of this allocation (--launcher slurm)
    label: str = ""  # A or B in an A/A experiment (--aa): the same cell under two names

    @property
    def name(self) -> str:
        return (
            f"{self.engine.value} np={self.workers} {self.spec.model}/{self.spec.dataset} "
            f"repeat {self.repeat} (seed {self.spec.seed})"
            + ("" if self.spec.grad_sync else " no-sync")
            + (f" [{', '.join(self.options)}]" if self.options else "")
            + (f" on {len(self.cluster.hosts)} hosts" if self.cluster else "")
            + (f" over a {format_rate(self.link_bps)} link" if self.link_bps else "")
            + (f" in Slurm job {self.allocation.job_id}" if self.allocation else "")
            + (f" as {self.label}" if self.label else "")
        )

    @property
    def keeps_trace(self) -> bool:
        """Whether its run keeps a trace: the first repeat of a synced cell does. Another
        repeat's traced steps show the same picture, and a compute-only twin's a step
        without its communication; 54 traces of the default sweep were 12 MB."""
        return self.repeat == 0 and self.spec.grad_sync

    @property
    def hosts_label(self) -> str:
        return ",".join(map(str, self.cluster.hosts)) if self.cluster else ""

    def key(self, env_key: str) -> str:
        """Identity for resume: same spec, engine, workers, repeat and environment."""
        blob = json.dumps(
            [
                # a spec field added later at its default leaves the key as it was
                canonical(self.spec.to_dict(), CELL_FIELDS_V1),
                self.engine.value,
                self.workers,
                self.repeat,
                self.seed_mode,
                env_key,
                *self.options,
                *([self.hosts_label] if self.cluster else []),
                # the rate and how it is shaped: a link shaped otherwise is another cell
                *([netns.link_key(self.link_bps)] if self.link_bps else []),
                *(["launcher=slurm"] if self.allocation else []),
                *([f"aa={self.label}"] if self.label else []),
                # pinned runs are a lever under test: never the same cell as unpinned ones
                *(["pin-cores"] if "--pin-cores" in self.measure else []),
            ],
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def spec_flags(spec: RunSpec) -> list[str]:
    """The runner flags that reproduce `spec` exactly."""
    argv = []
    for name, value in spec.to_dict().items():
        if value is not None:
            text = str(value).lower() if isinstance(value, bool) else str(value)
            argv += ["--" + name.replace("_", "-"), text]
    return argv


def plan(config: SweepConfig, base: RunSpec) -> list[Cell]:
    """All cells, repeat-major so that slow drift of the machine spreads over every engine.

    Each multi-worker cell also gets its compute-only twin (grad_sync=false) unless
    `comm_cost` is off: compare derives the unhidden communication from the pair.
    """
    where = _Where.of(config)
    cells = []
    for repeat in range(config.repeats):
        seed = base.seed + repeat if config.seed_mode == "vary" else base.seed
        for model in config.models:
            for dataset in config.datasets or (models.get(model).default_dataset,):
                spec = base.replace(model=model, dataset=dataset, seed=seed)
                for workers in config.workers:
                    twins = (
                        [spec.replace(grad_sync=False)] if config.comm_cost and workers > 1 else []
                    )
                    for engine in config.engines:
                        for s in (spec, *twins):
                            cells += where.labelled(where.cell(engine, workers, s, repeat))
    return cells


@dataclasses.dataclass(frozen=True)
class _Where:
    """What every cell of a sweep shares: where it runs and how it measures."""

    config: SweepConfig
    cluster: Cluster | None
    allocation: slurm.Allocation | None

    @classmethod
    def of(cls, config: SweepConfig) -> _Where:
        alloc = None
        if config.launcher == SLURM:
            try:
                alloc = dataclasses.replace(slurm.allocation(), port=config.master_port)
                for w in config.workers:
                    alloc.placement(w)
            except LaunchError as exc:
                raise SweepError(str(exc)) from None
        return cls(config, config.cluster(), alloc)

    def labelled(self, cell: Cell) -> list[Cell]:
        """The cell, or in an A/A experiment the cell as A then as B."""
        if not self.config.aa:
            return [cell]
        return [dataclasses.replace(cell, label=label) for label in ("A", "B")]

    def cell(self, engine: Engine, workers: int, spec: RunSpec, repeat: int) -> Cell:
        options = self.config.options(engine)
        if self.allocation:  # an engine's own defaults inside an allocation
            options = engines.get(engine).slurm_options(options, None)
        return Cell(
            engine,
            workers,
            spec,
            repeat,
            self.config.seed_mode,
            options,
            self.cluster,
            self.config.measure_flags(),
            self.config.link_bps(),
            self.allocation,
        )


def engine_unavailable(engine: Engine, python: str | None = None) -> str | None:
    """Why `engine` cannot run on this machine (launcher or package missing), or None.

    An engine that is not installed is not bad input: its cells are recorded as
    unavailable and the others run. With `python` given only its launcher is
    checked: another interpreter's packages cannot be seen from here, and a cell
    that then fails to import its engine is recorded as failed with the reason.
    """
    entry = engines.get(engine)
    top = entry.top_module
    try:
        engines.local_argv(engine, 1, [], python=python)
    except LaunchError as exc:
        return str(exc)
    if python is not None:
        return None
    try:
        missing = importlib.util.find_spec(top) is None
    except ImportError:  # a finder that refuses the name: absent all the same
        missing = True
    if missing:
        return f"engine {engine.value} needs the {top!r} package, not installed here; {entry.install_hint}"
    return None


def check_engines(engines: Sequence[Engine], python: str | None = None) -> dict[Engine, str]:
    """The engines that cannot run here, each with the reason (empty: all can)."""
    reasons = {}
    for engine in engines:
        why = engine_unavailable(engine, python)
        if why:
            reasons[engine] = why
    return reasons


def check_launches(config: SweepConfig, used: Sequence[Engine], python: str | None = None) -> None:
    """Each engine's own pre-launch checks of the sweep's options on this machine."""
    if config.launcher == SLURM:
        where = Where.SLURM
    else:
        where = Where.LOCAL if config.cluster() is None else Where.HOSTS
    for engine in used:
        check = engines.get(engine).check_launch
        if check is None:
            continue
        try:
            check(config.option_map(engine), where, python)
        except LaunchError as exc:
            raise SweepError(str(exc)) from None


def check_plan(
    cells: Sequence[Cell], config: SweepConfig, python: str | None = None, devices: bool = True
) -> dict[Engine, str]:
    """Refuse the whole sweep before launching anything if any cell is impossible.

    Returns the engines not installed here, with the reason: their cells are
    recorded as unavailable instead of launched. Their settings are still checked,
    so a sweep that is wrong somewhere fails the same way on every machine.
    `devices=False` skips the GPU check, for a plan printed here to run elsewhere
    (`--dry-run` of a GPU sweep on a CPU machine).
    """
    used = sorted({c.engine for c in cells}, key=lambda e: e.value)
    unavailable = check_engines(used, python)
    check_launches(config, [e for e in used if e not in unavailable], python)
    seen = set()
    # Sizes are what is checked: synthetic data in outline (ResNet-50's 224x224 set takes
    # seconds to generate), a file's data loaded once for all its cells' worker counts.
    load = functools.lru_cache(maxsize=1)(outline)
    for cell in cells:
        try:
            engines.check_engine(cell.engine, cell.spec)
            if devices and not cell.cluster:  # other hosts' GPUs are not visible from here
                check_device(cell.spec)
        except InputError as exc:
            raise SweepError(f"cell {cell.name}: {exc}") from None
        # the seed changes values, not sizes: one check per spec and worker count
        key = (cell.spec.replace(seed=0).to_dict().__repr__(), cell.workers)
        if key in seen:
            continue
        seen.add(key)
        try:
            prepare(cell.spec, cell.workers, load)
        except InputError as exc:
            raise SweepError(f"cell {cell.name}: {exc}") from None
        # Remote machines' cores are not known here; their owner sizes --hosts slots.
        remote = cell.cluster or cell.allocation  # cores elsewhere: the allocation sizes them
        if cell.spec.device is Device.CPU and not config.oversubscribe and not remote:
            cores = machine.usable_cpus()
            if cell.workers * cell.spec.threads > cores:
                raise SweepError(
                    f"cell {cell.name}: {cell.workers} workers x {cell.spec.threads} threads exceed "
                    f"the {cores} CPUs this process may use; the timings would measure oversubscription. "
                    "Lower --workers/--threads or pass --oversubscribe"
                )
    return unavailable
