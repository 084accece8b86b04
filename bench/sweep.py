"""`bench run`: engines x worker counts x models x repeats, each cell through its launcher.

Every cell is checked before the first one starts, launched as an argv list in
its own process session, given a time-out, and always leaves a record: the
runner writes it, or the sweep writes a failed/timeout record with the last log
lines when the runner could not. Cells already recorded ok with the same spec
and environment are skipped (resume) unless forced.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import math
import os
import reprlib
import signal
import subprocess
import sys
import time
import tomllib
import types
import typing
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml

import models
from bench import data as bdata
from bench import engines, launch, records, slurm
from bench import env as benv
from bench.checks import InputError, check_device, prepare
from bench.engines import Engine
from bench.netns import format_rate
from bench.record import RunRecord
from bench.spec import CELL_FIELDS_V1, Device, RunSpec, SpecError, canonical


class SweepError(ValueError):
    """A sweep that cannot start; the message names the setting."""


class Interrupted(BaseException):
    """SIGTERM or SIGHUP reached `bench run`: it stops as on Ctrl-C (BaseException, so
    nothing on the way up mistakes it for an error to handle)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


@dataclasses.dataclass(frozen=True)
class SweepConfig:
    """What to sweep. Loaded from flags or a TOML/YAML file; unknown keys are refused."""

    # every registered engine
    engines: tuple[Engine, ...] = dataclasses.field(default_factory=lambda: tuple(Engine))
    workers: tuple[int, ...] = (1, 2)
    models: tuple[str, ...] = ("mlp", "lenet")
    datasets: tuple[str, ...] = ()  # empty: each model's default dataset
    repeats: int = 3
    seed_mode: str = "vary"  # vary: seed + repeat per repeat; fixed: one seed, timing noise only
    timeout: float = 600.0  # seconds per cell
    oversubscribe: bool = False
    # Also run each multi-worker cell with grad_sync=false (compute-only twin), from
    # which compare derives the share of a step lost to unhidden communication.
    comm_cost: bool = True
    # Engine-specific options "ENGINE:KEY=VALUE", passed to that engine's cells only.
    engine_options: tuple[str, ...] = ()
    hvd_timeline: bool = False  # keep a Horovod timeline per horovod cell, in its log dir
    # Multi-node: "HOST:SLOTS,..." or a hostfile; empty runs every cell on this machine.
    hosts: str = ""
    hostfile: str = ""
    remote_shell: str = launch.DEFAULT_REMOTE_SHELL
    iface: str = ""  # network interface for the collectives (GLOO/NCCL_SOCKET_IFNAME, horovod)
    master_port: int = 29400
    ssh_port: int = 0  # horovodrun's ssh port to the other hosts; 0: ssh's default
    ssh_identity: str = ""  # horovodrun's ssh key; empty: ssh's default
    # A rate such as "1gbit": every cell runs across two local network namespaces whose
    # link is shaped to it (bench/netns.py); empty: no emulated link.
    emulate_link: str = ""
    # local: launchers on this machine (or --hosts); slurm: job steps of this allocation
    launcher: str = slurm.LOCAL
    # How each run measures (runners/protocol.py Measure); None: the runner's default.
    window_steps: int | None = None
    target_ci: float | None = None
    measure_cap_s: float | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SweepConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(map(str, set(data) - known))
        if unknown:
            raise SweepError(
                f"unknown sweep setting(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        if data.get("emulate_link") and (data.get("hosts") or data.get("hostfile")):
            raise SweepError(
                "--emulate-link runs on two network namespaces it makes itself; drop "
                "--hosts/--hostfile (or drop --emulate-link to run on those hosts)"
            )
        hints = typing.get_type_hints(cls)
        values = {key: _setting(key, hints[key], value) for key, value in data.items()}
        config = cls(**values)
        cluster = config.cluster()
        if config.emulate_link and "workers" not in values:  # one worker per namespace
            config = dataclasses.replace(config, workers=(2,))
        if cluster and "workers" not in values:  # default: every slot of every host
            per = min(h.slots for h in cluster.hosts)
            config = dataclasses.replace(config, workers=(per * len(cluster.hosts),))
        return config.validate()

    def cluster(self) -> launch.Cluster | None:
        """The hosts of a multi-node sweep, or None for this machine only."""
        if self.hosts and self.hostfile:
            raise SweepError("give hosts or hostfile, not both")
        try:
            if self.hosts:
                hosts = launch.parse_hosts(self.hosts)
            elif self.hostfile:
                hosts = launch.read_hostfile(self.hostfile)
            else:
                return None
            return launch.Cluster(
                hosts,
                port=self.master_port,
                iface=self.iface or None,
                remote_shell=self.remote_shell,
                ssh_port=self.ssh_port or None,
                ssh_identity=self.ssh_identity or None,
            )
        except launch.LaunchError as exc:
            raise SweepError(str(exc)) from None

    def validate(self) -> SweepConfig:
        if not self.engines:
            raise SweepError(f"engines is empty; name at least one of: {engines.names()}")
        if not self.workers or any(not isinstance(w, int) or w < 1 for w in self.workers):
            raise SweepError(f"workers must be integers >= 1, got {list(self.workers)}")
        if not self.models:
            raise SweepError("models is empty; see `bench models`")
        for name in self.models:
            try:
                models.get(name)
            except models.UnknownModelError as exc:
                raise SweepError(str(exc)) from None
        if not isinstance(self.repeats, int) or self.repeats < 1:
            raise SweepError(f"repeats must be an integer >= 1, got {self.repeats!r}")
        if self.seed_mode not in ("vary", "fixed"):
            raise SweepError(f"seed_mode must be 'vary' or 'fixed', got {self.seed_mode!r}")
        if not self.timeout > 0:
            raise SweepError(f"timeout must be > 0 seconds, got {self.timeout}")
        if self.launcher not in slurm.LAUNCHERS:
            raise SweepError(
                f"launcher must be one of {', '.join(slurm.LAUNCHERS)}, got {self.launcher!r}"
            )
        if self.launcher == slurm.SLURM and (self.hosts or self.hostfile):
            raise SweepError(
                "--launcher slurm takes its hosts from the Slurm allocation; drop --hosts/--hostfile"
            )
        cluster = self.cluster()
        if self.emulate_link:
            self.link_bps()  # a bad rate is refused before anything starts
            odd = [w for w in self.workers if w % 2]
            if odd:
                raise SweepError(
                    f"--emulate-link spreads workers evenly over two namespaces; {odd[0]} "
                    "workers cannot be: use even --workers, e.g. --workers 2"
                )
        if cluster:
            for w in self.workers:
                try:
                    cluster.placement(w)
                except launch.LaunchError as exc:
                    raise SweepError(str(exc)) from None
        for item in self.engine_options:
            engine, sep, kv = item.partition(":")
            key, eq, value = kv.partition("=")
            if not sep or not eq or not key or engine not in {e.value for e in Engine}:
                raise SweepError(
                    f"engine option {item!r} must look like ENGINE:KEY=VALUE with ENGINE one of "
                    + ", ".join(e.value for e in Engine)
                )
            try:  # the registry's declarations, which the adapters check too
                engines.check_options(Engine(engine), {key: value})
            except SpecError as exc:
                raise SweepError(f"--engine-option {item}: {exc}") from None
        if self.window_steps is not None and self.window_steps < 1:
            raise SweepError(f"window_steps must be >= 1, got {self.window_steps}")
        if self.target_ci is not None and not 0 <= self.target_ci < 1:
            raise SweepError(f"target_ci must be in [0, 1) (0.02 is +-2%), got {self.target_ci}")
        if self.measure_cap_s is not None and self.measure_cap_s < 0:
            raise SweepError(f"measure_cap_s must be >= 0, got {self.measure_cap_s}")
        for engine in Engine:  # options that conflict with each other (adasum, controller)
            try:
                engines.check_options(engine, self.option_map(engine))
            except SpecError as exc:
                raise SweepError(f"--engine-option: {exc}") from None
        return self

    def link_bps(self) -> int | None:
        """The emulated link's rate in bits/s, or None without one."""
        if not self.emulate_link:
            return None
        from bench.netns import LinkError, parse_rate

        try:
            return parse_rate(self.emulate_link)
        except LinkError as exc:
            raise SweepError(str(exc)) from None

    def measure_flags(self) -> tuple[str, ...]:
        """Runner flags for how each run measures (only those set)."""
        flags = {
            "--window-steps": self.window_steps,
            "--target-ci": self.target_ci,
            "--measure-cap-s": self.measure_cap_s,
        }
        return tuple(a for k, v in flags.items() if v is not None for a in (k, str(v)))

    def option_map(self, engine: Engine) -> dict[str, str]:
        """`engine`'s options as a mapping (the last of a repeated key wins, as in the runner)."""
        return dict(kv.partition("=")[::2] for kv in self.options(engine))

    def options(self, engine: Engine) -> tuple[str, ...]:
        """The KEY=VALUE engine options that apply to `engine`'s cells."""
        return tuple(
            kv
            for item in self.engine_options
            for e, _, kv in [item.partition(":")]
            if e == engine.value
        )


def _short(value: Any) -> str:
    return reprlib.repr(value)


def _setting(name: str, hint: Any, value: Any) -> Any:
    """One sweep setting checked against its annotation (config files hold any type)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):  # X | None: unset or X
        if value is None:
            return None
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if typing.get_origin(hint) is tuple:
        item = typing.get_args(hint)[0]
        kind = {int: "integers", str: "strings"}.get(item, "names")
        if not isinstance(value, (list, tuple)):
            raise SweepError(
                f"{name} must be a list of {kind}, e.g. {name} = [...], got {_short(value)}"
            )
        if item is Engine:
            try:
                return tuple(Engine(e) for e in value)
            except ValueError as exc:
                raise SweepError(f"{exc}; engines are: {engines.names()}") from None
        if any(isinstance(v, bool) or not isinstance(v, item) for v in value):
            raise SweepError(f"{name} must be a list of {kind}, got {_short(value)}")
        return tuple(value)
    if hint is bool:
        if not isinstance(value, bool):  # "no" is a non-empty string, hence true
            raise SweepError(f"{name} must be true or false, got {_short(value)}")
    elif hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SweepError(f"{name} must be an integer, got {_short(value)}")
    elif hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SweepError(f"{name} must be a number, got {_short(value)}")
        if not math.isfinite(value):
            raise SweepError(f"{name} must be a finite number, got {value!r}")
        return float(value)
    elif hint is str and not isinstance(value, str):
        raise SweepError(f"{name} must be a string, got {_short(value)}")
    return value


def load_config_file(path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(sweep settings, spec fields) from a TOML or YAML file; the spec sits under [spec]."""
    p = Path(path)
    if not p.is_file():
        raise SweepError(f"config file {p} not found")
    if p.suffix not in (".toml", ".yaml", ".yml"):
        raise SweepError(f"config file {p} must end in .toml, .yaml or .yml")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SweepError(
            f"config file {p} is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset "
            f"{exc.start}); save it as UTF-8"
        ) from None
    except OSError as exc:
        raise SweepError(f"cannot read config file {p}: {exc.strerror}") from None
    try:
        data = tomllib.loads(text) if p.suffix == ".toml" else yaml.safe_load(text) or {}
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        message = " ".join(str(exc).split())  # YAML's messages span lines
        raise SweepError(f"config file {p} does not parse: {message}") from None
    except RecursionError:
        raise SweepError(
            f"config file {p} nests too deeply to be a sweep config; a config is a table of "
            "settings and one [spec] table"
        ) from None
    if not isinstance(data, dict):
        raise SweepError(f"config file {p} must hold a table/mapping at the top level")
    spec = data.pop("spec", {})
    if not isinstance(spec, dict):
        raise SweepError(f"config file {p}: [spec] must be a table/mapping")
    return data, spec


@dataclasses.dataclass(frozen=True)
class Cell:
    engine: Engine
    workers: int
    spec: RunSpec
    repeat: int
    seed_mode: str
    options: tuple[str, ...] = ()  # engine options KEY=VALUE for this cell's engine
    cluster: launch.Cluster | None = None  # None: this machine
    # runner flags for how the run measures; they change no trained number, so not the key
    measure: tuple[str, ...] = ()
    link_bps: int | None = None  # the emulated link's rate (bench/netns.py); None: none
    allocation: slurm.Allocation | None = None  # job steps of this allocation (--launcher slurm)

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
        )

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
                *([f"link={self.link_bps}"] if self.link_bps else []),
                *(["launcher=slurm"] if self.allocation else []),
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
    """All cells, repeat-major so that slow drift of the machine spreads over every engine."""
    cluster = config.cluster()
    alloc = None
    if config.launcher == slurm.SLURM:
        try:
            alloc = dataclasses.replace(slurm.allocation(), port=config.master_port)
            for w in config.workers:
                alloc.placement(w)
        except launch.LaunchError as exc:
            raise SweepError(str(exc)) from None
    cells = []
    for repeat in range(config.repeats):
        seed = base.seed + repeat if config.seed_mode == "vary" else base.seed
        for model in config.models:
            datasets = config.datasets or (models.get(model).default_dataset,)
            for dataset in datasets:
                spec = base.replace(model=model, dataset=dataset, seed=seed)
                for workers in config.workers:
                    for engine in config.engines:
                        opts = config.options(engine)
                        if alloc and engine is Engine.HOROVOD:
                            opts = slurm_horovod_options(opts)
                        for s in (spec, spec.replace(grad_sync=False)):
                            if s.grad_sync or (config.comm_cost and workers > 1):
                                cells.append(
                                    Cell(
                                        engine,
                                        workers,
                                        s,
                                        repeat,
                                        config.seed_mode,
                                        opts,
                                        cluster,
                                        config.measure_flags(),
                                        config.link_bps(),
                                        alloc,
                                    )
                                )
    return cells


def slurm_horovod_options(options: tuple[str, ...]) -> tuple[str, ...]:
    """Horovod's options in Slurm: the MPI controller (srun --mpi=pmix) unless one was chosen.

    Recorded as controller=mpi, so compare shows these runs as horovod[mpi]. Without
    MPI in this Horovod, or PMIx in srun, they stay on Gloo (horovodrun).
    """
    given = dict(o.partition("=")[::2] for o in options)
    if (
        "controller" in given
        or "adasum" in given
        or Engine.HOROVOD in check_engines([Engine.HOROVOD])
    ):
        return options
    try:
        mpi = slurm.horovod_mpi_default()
    except launch.LaunchError:
        return options
    return (*options, "controller=mpi") if mpi else options


def engine_unavailable(engine: Engine, python: str | None = None) -> str | None:
    """Why `engine` cannot run on this machine (launcher or package missing), or None.

    An engine that is not installed is not bad input: its cells are recorded as
    unavailable and the others run. With `python` given only its launcher is
    checked: another interpreter's packages cannot be seen from here, and a cell
    that then fails to import its engine is recorded as failed with the reason.
    """
    import importlib.util

    entry = engines.get(engine)
    top = entry.top_module
    try:
        launch.launch_argv(engine, 1, [], python=python)
    except launch.LaunchError as exc:
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
    if config.launcher == slurm.SLURM:
        where = engines.SLURM
    else:
        where = engines.LOCAL if config.cluster() is None else engines.HOSTS
    for engine in used:
        check = engines.get(engine).check_launch
        if check is None:
            continue
        try:
            check(config.option_map(engine), where, python)
        except launch.LaunchError as exc:
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
    # Cells come worker count by worker count for each spec: one dataset held at a time
    # (ResNet-50's synthetic 224x224 set takes seconds to generate).
    load = functools.lru_cache(maxsize=1)(bdata.load_dataset)
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
            cores = benv.usable_cpus()
            if cell.workers * cell.spec.threads > cores:
                raise SweepError(
                    f"cell {cell.name}: {cell.workers} workers x {cell.spec.threads} threads exceed "
                    f"the {cores} CPUs this process may use; the timings would measure oversubscription. "
                    "Lower --workers/--threads or pass --oversubscribe"
                )
    return unavailable


def kill_tree(proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """Stop a launcher and every process under it (its session and any stragglers)."""
    import psutil

    try:
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    for sig in (signal.SIGTERM, signal.SIGKILL):
        # SIGCONT after SIGTERM: a stopped (SIGSTOPped) process only acts on its
        # SIGTERM once continued; without it, it would take the whole grace period.
        for s in (sig, signal.SIGCONT):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, s)
            for p in tree:
                with contextlib.suppress(psutil.NoSuchProcess):
                    p.send_signal(s)
        _, alive = psutil.wait_procs(tree, timeout=grace)
        if not alive:
            break
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def attempt_record(
    target: Path,
    attempt: str,
    status: str,
    error: str | None,
    logs: Sequence[Path],
    failed: Callable[[str, str], RunRecord],
) -> tuple[RunRecord, bool]:
    """The record launch `attempt` left in `target`, or a failed one written for it now.

    Every launch leaves exactly one record. The run's own, found by its `attempt`
    label, comes back with True. Without one, `failed(status, error)` is appended and
    comes back with False: its status the launcher's (ok becomes failed: a launch that
    left no record failed whatever its exit code), its error the launcher's followed by
    the last lines of each of its `logs`.
    """
    written = records.by_label(target, "attempt", attempt)
    if written:
        return written[-1], True
    error = error or "no record written"
    for log in logs:
        error += f"\n--- last lines of {log} ---\n{_tail(log)}"
    if status == records.Status.OK:
        status = records.Status.FAILED
    rec = failed(status, error)
    records.append(target, rec)
    return rec, False


def run_launch(argv: list[str], log: Path, timeout: float) -> tuple[str, str | None, float]:
    """Run one launcher command in its own session, output to `log`, within `timeout`.

    Returns (status, error, seconds). On time-out or Ctrl-C the whole process tree is
    killed, so no worker outlives its cell.
    """
    return run_launches([argv], [log], timeout)


# After one host's launcher fails, how long its peers get to fail on their own (their
# collectives time out) before they are killed.
PEER_GRACE_S = 30.0


def run_launches(
    argvs: Sequence[list[str]], logs: Sequence[Path], timeout: float
) -> tuple[str, str | None, float]:
    """Run one launcher per host together, each in its own session with its own log.

    The cell fails as soon as one launcher fails; the others are given PEER_GRACE_S to
    notice, then killed. A time-out or Ctrl-C kills every tree.
    """
    start = time.monotonic()
    deadline = start + timeout
    procs: list[subprocess.Popen[bytes]] = []
    handles = []
    try:
        for log in logs:
            handles.append(open(log, "wb"))  # noqa: SIM115 - closed in finally
    except OSError as exc:
        for fh in handles:
            fh.close()
        raise records.RecordsError(f"cannot create log file {log}: {exc.strerror}") from None
    try:
        for argv, fh in zip(argvs, handles, strict=True):
            procs.append(
                subprocess.Popen(
                    argv,
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    cwd=launch.ROOT,
                )
            )
        failed_at: float | None = None
        while True:
            codes = [p.poll() for p in procs]
            if all(c is not None for c in codes):
                break
            now = time.monotonic()
            if any(c not in (None, 0) for c in codes) and failed_at is None:
                failed_at = now
            if now >= deadline or (failed_at is not None and now - failed_at > PEER_GRACE_S):
                for p in procs:
                    if p.poll() is None:
                        kill_tree(p)
                if now >= deadline:
                    return (
                        records.Status.TIMEOUT,
                        f"cell exceeded its time-out of {timeout:.0f}s",
                        time.monotonic() - start,
                    )
                break
            time.sleep(0.1)
    except BaseException:  # Ctrl-C: stop the workers, then let the caller end
        for p in procs:
            kill_tree(p)
        raise
    finally:
        for fh in handles:
            fh.close()
    bad = [(i, p.returncode) for i, p in enumerate(procs) if p.returncode != 0]
    if not bad:
        return records.Status.OK, None, time.monotonic() - start
    if len(procs) == 1:
        error = f"launcher exited with code {bad[0][1]}"
    else:
        error = "launcher failed on " + ", ".join(f"host {i} (exit code {rc})" for i, rc in bad)
    return records.Status.FAILED, error, time.monotonic() - start


@dataclasses.dataclass
class CellResult:
    cell: Cell
    status: str
    seconds: float
    log_dir: Path
    error: str | None = None


def cell_argv(
    cell: Cell,
    results: Path,
    log_dir: Path,
    labels: dict[str, Any],
    timeout: float,
    timeline: bool = False,
    python: str | None = None,
) -> list[launch.NodeLaunch]:
    """The exact launcher argv of one cell, one per host it starts from (--dry-run prints them)."""
    runner_args = [
        *spec_flags(cell.spec),
        "--results",
        str(results),
        "--quiet",
        "--collective-timeout",
        str(max(timeout / 2, 30.0)),
    ]
    runner_args += [a for k, v in labels.items() for a in ("--label", f"{k}={v}")]
    runner_args += list(cell.measure)
    options = list(cell.options)
    if timeline and cell.engine is Engine.HOROVOD:
        options.append(f"timeline={log_dir / 'timeline.json'}")
    runner_args += [a for kv in options for a in ("--engine-option", kv)]
    option_map = dict(o.partition("=")[::2] for o in options)
    if cell.allocation:
        return slurm.launches(
            cell.engine,
            cell.allocation,
            cell.workers,
            runner_args,
            tag=slurm_tag(labels),
            log_dir=log_dir,
            python=python,
            options=option_map,
        )
    return engines.build_launch(
        cell.engine,
        cell.cluster or launch.Cluster.this_machine(cell.workers),
        cell.workers,
        runner_args,
        log_dir=log_dir,
        python=python or sys.executable,
        options=option_map,
    )


def slurm_tag(labels: dict[str, Any]) -> str:
    """The tag naming a cell's job steps: its attempt (or, for --dry-run, its cell key)."""
    return str(labels.get("attempt") or labels.get("cell") or "cell")[:16]


def _write_log(path: Path, text: str) -> None:
    """Write a log file, turning a full disk into the same one-line error as records get."""
    try:
        path.write_text(text)
    except OSError as exc:
        with contextlib.suppress(OSError):
            path.unlink()  # no half-written file left behind
        raise records.RecordsError(f"cannot write {path}: {exc.strerror}") from None


def cell_log_dir(run_dir: Path, index: int, cell: Cell) -> Path:
    sync = "" if cell.spec.grad_sync else "-nosync"
    return run_dir / (
        f"{index:03d}-{cell.engine.value}-np{cell.workers}-{cell.spec.model}-r{cell.repeat}{sync}"
    )


def _cell_record(
    cell: Cell,
    labels: dict[str, Any],
    argv: list[str] | list[list[str]],
    status: str,
    error: str,
) -> RunRecord:
    """The record `bench run` writes for a cell whose launch left none of its own."""
    return records.new_record(
        cell.spec.to_dict(),
        cell.engine.value,
        cell.workers,
        labels,
        {"name": "bench run", "argv": argv},
        status=status,
        error=error,
    )


def run_cell(
    cell: Cell,
    index: int,
    results: Path,
    run_dir: Path,
    timeout: float,
    env_key: str,
    sweep_id: str,
    python: str | None = None,
    timeline: bool = False,
) -> CellResult:
    """Launch one cell and make sure it leaves exactly one record."""
    attempt = uuid.uuid4().hex
    log_dir = cell_log_dir(run_dir, index, cell)
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise records.RecordsError(f"cannot create log folder {log_dir}: {exc.strerror}") from None
    labels: dict[str, Any] = {
        "cell": cell.key(env_key),
        "attempt": attempt,
        "sweep": sweep_id,
        "repeat": cell.repeat,
        "seed_mode": cell.seed_mode,
        "log_dir": str(log_dir),
    }
    if cell.cluster:
        labels["hosts"] = cell.hosts_label
    if cell.link_bps:  # records.new_record turns it into the record's `link`
        labels["link_rate_bps"] = cell.link_bps
    if cell.allocation:
        labels["slurm_job"] = cell.allocation.job_id
        labels["hosts"] = ",".join(map(str, cell.allocation.placement(cell.workers)))
    # the runner's record measures launch-to-stop from it (on this machine's clock)
    labels["launched_at"] = time.time()
    nodes = cell_argv(cell, results, log_dir, labels, timeout, timeline, python)
    argvs = [n.argv for n in nodes]
    argv = argvs[0] if len(argvs) == 1 else argvs
    shown = [benv.scrub_argv(a) for a in argvs]  # no environment entries off the allow-list
    _write_log(log_dir / "argv.json", json.dumps(shown[0] if len(shown) == 1 else shown, indent=1))
    logs = [log_dir / "launcher.log"]
    if len(nodes) > 1:
        logs = [log_dir / f"launcher-{i}-{n.host.name}.log" for i, n in enumerate(nodes)]
    start = time.monotonic()
    try:
        try:
            status, error, seconds = run_launches(argvs, logs, timeout)
        finally:
            if cell.allocation:  # a killed srun can leave its step running: cancel it
                slurm.cancel_steps(cell.allocation.job_id, slurm_tag(labels))
            # launchers echo the environment into their logs (paddle's envlog.N and more)
            benv.scrub_log_dir(log_dir)
    except (KeyboardInterrupt, Interrupted) as exc:
        # The tree is already killed; the cell still leaves its record (unless the run
        # wrote one just before), so nothing that ran goes unrecorded.
        if not records.by_label(records.results_file(results), "attempt", attempt):
            why = exc.name if isinstance(exc, Interrupted) else "SIGINT (Ctrl-C)"
            error = (
                f"interrupted by {why} after {time.monotonic() - start:.1f}s; the cell's "
                "processes were killed; rerun the sweep to run it again"
            )
            records.append(results, _cell_record(cell, labels, argv, records.Status.FAILED, error))
        raise

    def failed(status: str, error: str) -> RunRecord:
        rec = _cell_record(cell, labels, argv, status, error)
        rec["launch_to_exit_s"] = seconds
        return rec

    rec, own = attempt_record(records.results_file(results), attempt, status, error, logs, failed)
    if not own:
        return CellResult(cell, rec["status"], seconds, log_dir, rec.get("error"))
    if rec["status"] != records.Status.OK:
        status, error = rec["status"], rec.get("error")
    elif status != records.Status.OK:
        # The run finished and recorded; the launcher failed afterwards (teardown).
        status, error = records.Status.OK, None
    return CellResult(cell, status, seconds, log_dir, error)


def record_unavailable(
    cell: Cell, results: Path, env_key: str, sweep_id: str, reason: str
) -> CellResult:
    """Record a cell of an engine not installed here, without launching anything."""
    labels = {
        "cell": cell.key(env_key),
        "attempt": uuid.uuid4().hex,
        "sweep": sweep_id,
        "repeat": cell.repeat,
        "seed_mode": cell.seed_mode,
    }
    if cell.cluster:
        labels["hosts"] = cell.hosts_label
    if cell.link_bps:
        labels["link_rate_bps"] = cell.link_bps
    rec = records.new_record(
        cell.spec.to_dict(),
        cell.engine.value,
        cell.workers,
        labels,
        {"name": "bench run", "argv": []},
        status=records.Status.UNAVAILABLE,
        error=reason,
    )
    records.append(results, rec)
    return CellResult(cell, records.Status.UNAVAILABLE, 0.0, Path(), reason)


def environment_key() -> str:
    env = benv.environment()
    return json.dumps([env["hostname"], benv.machine_key(env), env["libraries"]], sort_keys=True)


def completed_cells(results: Path) -> set[str]:
    loaded = (
        records.load([records.results_file(results)])
        if records.results_file(results).exists()
        else None
    )
    if loaded is None:
        return set()
    # a cell recorded under another measurement protocol is not done: it is rerun
    return {
        (r.get("labels") or {}).get("cell", "")
        for r in loaded.records
        if r["status"] == records.Status.OK
        and records.protocol_version(r) == records.PROTOCOL_VERSION
    }


def _fmt_s(seconds: float) -> str:
    m, s = divmod(int(seconds + 0.5), 60)
    return f"{m}:{s:02d}"


def run_sweep(
    config: SweepConfig,
    base: RunSpec,
    results: Path,
    *,
    force: bool = False,
    out: TextIO = sys.stdout,
    python: str | None = None,
    on_cell: Callable[[CellResult], None] | None = None,
) -> list[CellResult]:
    """Run every cell not already recorded; returns what ran (skipped cells excluded)."""
    cells = plan(config, base)
    unavailable = check_plan(cells, config, python)
    records.check_writable(results)
    env_key = environment_key()
    done = set() if force else completed_cells(results)
    todo = [c for c in cells if c.key(env_key) not in done]
    skipped = len(cells) - len(todo)
    sweep_id = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]
    run_dir = (results if results.suffix != ".jsonl" else results.parent) / "runs" / sweep_id
    print(
        f"bench run: {len(cells)} cells ({skipped} already recorded, skipped); logs in {run_dir}",
        file=out,
        flush=True,
    )
    for engine, why in unavailable.items():
        n = sum(c.engine is engine for c in todo)
        print(
            f"bench run: WARNING: engine {engine.value} is not installed here, so its {n} "
            f"cells are recorded as unavailable and not run ({why})",
            file=out,
            flush=True,
        )
    outcomes: list[CellResult] = []
    start = time.monotonic()
    for i, cell in enumerate(todo, start=1):
        print(f"[{i:>3}/{len(todo)}] {cell.name} ...", end="", file=out, flush=True)
        if cell.engine in unavailable:
            res = record_unavailable(cell, results, env_key, sweep_id, unavailable[cell.engine])
            outcomes.append(res)
            print(f" {res.status}", file=out, flush=True)
            if on_cell:
                on_cell(res)
            continue
        res = run_cell(
            cell,
            i,
            results,
            run_dir,
            config.timeout,
            env_key,
            sweep_id,
            python,
            config.hvd_timeline,
        )
        outcomes.append(res)
        elapsed = time.monotonic() - start
        left = elapsed / i * (len(todo) - i)
        print(
            f" {res.status} {res.seconds:.1f}s  (elapsed {_fmt_s(elapsed)}, ~{_fmt_s(left)} left)",
            file=out,
            flush=True,
        )
        if res.status != records.Status.OK and res.error:
            for line in res.error.strip().splitlines()[-8:]:
                print(f"      | {line}", file=out)
        if on_cell:
            on_cell(res)
    return outcomes


__all__ = [
    "Cell",
    "CellResult",
    "SweepConfig",
    "SweepError",
    "check_plan",
    "engine_unavailable",
    "load_config_file",
    "plan",
    "run_cell",
    "run_sweep",
    "spec_flags",
]
