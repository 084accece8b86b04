"""A sweep's settings: from flags or a TOML/YAML file, checked before anything runs."""

from __future__ import annotations

import dataclasses
import math
import reprlib
import tomllib
import types
import typing
from pathlib import Path
from typing import Any

import yaml

import models
from bench import engines
from bench.core.errors import LaunchError, LinkError, SpecError, SweepError
from bench.core.units import parse_rate
from bench.engines import Engine
from bench.engines import options as engine_options
from bench.launch.cluster import DEFAULT_REMOTE_SHELL, Cluster, parse_hosts, read_hostfile

# Where cells run: launchers on this machine (or --hosts), or job steps of a Slurm job.
LOCAL, SLURM = "local", "slurm"
LAUNCHERS = (LOCAL, SLURM)


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
    # an A/A experiment: every cell twice a repeat, labelled A and B, compared as two engines
    aa: bool = False
    timeout: float = 600.0  # seconds per cell
    oversubscribe: bool = False
    # Also run each multi-worker cell with grad_sync=false (compute-only twin), from
    # which compare derives the share of a step lost to unhidden communication.
    comm_cost: bool = True
    # Engine-specific options "ENGINE:KEY=VALUE", passed to that engine's cells only.
    engine_options: tuple[str, ...] = ()
    # keep each engine's own trace (its entry's trace_option) per cell, in its log dir
    engine_traces: bool = False
    # Multi-node: "HOST:SLOTS,..." or a hostfile; empty runs every cell on this machine.
    hosts: str = ""
    hostfile: str = ""
    remote_shell: str = DEFAULT_REMOTE_SHELL
    iface: str = ""  # network interface for the collectives (GLOO/NCCL_SOCKET_IFNAME, horovod)
    master_port: int = 29400
    ssh_port: int = 0  # horovodrun's ssh port to the other hosts; 0: ssh's default
    ssh_identity: str = ""  # horovodrun's ssh key; empty: ssh's default
    # A rate such as "1gbit": every cell runs across two local network namespaces whose
    # link is shaped to it (bench/launch/netns.py); empty: no emulated link.
    emulate_link: str = ""
    # local: launchers on this machine (or --hosts); slurm: job steps of this allocation
    launcher: str = LOCAL
    # How each run measures (bench/measure/window.py Measure); None: the runner's default.
    window_steps: int | None = None
    target_ci: float | None = None
    measure_cap_s: float | None = None
    profile_steps: int | None = None
    trace_steps: int | None = None
    pin_cores: bool | None = None  # each worker and its engine's threads on cores of their own

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

    def cluster(self) -> Cluster | None:
        """The hosts of a multi-node sweep, or None for this machine only."""
        if self.hosts and self.hostfile:
            raise SweepError("give hosts or hostfile, not both")
        try:
            if self.hosts:
                hosts = parse_hosts(self.hosts)
            elif self.hostfile:
                hosts = read_hostfile(self.hostfile)
            else:
                return None
            return Cluster(
                hosts,
                port=self.master_port,
                iface=self.iface or None,
                remote_shell=self.remote_shell,
                ssh_port=self.ssh_port or None,
                ssh_identity=self.ssh_identity or None,
            )
        except LaunchError as exc:
            raise SweepError(str(exc)) from None

    def validate(self) -> SweepConfig:
        """Refuse settings no cell could run with, naming the setting; returns self."""
        self._check_lists()
        self._check_numbers()
        if self.launcher not in LAUNCHERS:
            raise SweepError(
                f"launcher must be one of {', '.join(LAUNCHERS)}, got {self.launcher!r}"
            )
        if self.launcher == SLURM and (self.hosts or self.hostfile):
            raise SweepError(
                "--launcher slurm takes its hosts from the Slurm allocation; drop --hosts/--hostfile"
            )
        self._check_placement()
        self._check_engine_options()
        return self

    def _check_lists(self) -> None:
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
        if self.seed_mode not in ("vary", "fixed"):
            raise SweepError(f"seed_mode must be 'vary' or 'fixed', got {self.seed_mode!r}")

    def _check_numbers(self) -> None:
        if not isinstance(self.repeats, int) or self.repeats < 1:
            raise SweepError(f"repeats must be an integer >= 1, got {self.repeats!r}")
        if not self.timeout > 0:
            raise SweepError(f"timeout must be > 0 seconds, got {self.timeout}")
        if self.window_steps is not None and self.window_steps < 1:
            raise SweepError(f"window_steps must be >= 1, got {self.window_steps}")
        if self.target_ci is not None and not 0 <= self.target_ci < 1:
            raise SweepError(f"target_ci must be in [0, 1) (0.02 is +-2%), got {self.target_ci}")
        if self.measure_cap_s is not None and self.measure_cap_s < 0:
            raise SweepError(f"measure_cap_s must be >= 0, got {self.measure_cap_s}")
        if self.profile_steps is not None and self.profile_steps < 0:
            raise SweepError(f"profile_steps must be >= 0 (0: off), got {self.profile_steps}")
        if self.trace_steps is not None and self.trace_steps < 0:
            raise SweepError(f"trace_steps must be >= 0 (0: off), got {self.trace_steps}")

    def _check_placement(self) -> None:
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
                except LaunchError as exc:
                    raise SweepError(str(exc)) from None

    def _check_engine_options(self) -> None:
        known = {e.value for e in Engine}
        for item in self.engine_options:
            engine, sep, kv = item.partition(":")
            key, eq, value = kv.partition("=")
            if not sep or not eq or not key:
                raise SweepError(
                    f"engine option {item!r} must look like ENGINE:KEY=VALUE with ENGINE one of "
                    + engines.names()
                )
            if engine not in known:
                raise SweepError(f"--engine-option {item}: {engines.unknown(engine)}")
            try:  # the registry's declarations, which the adapters check too
                engines.check_options(Engine(engine), {key: value})
            except SpecError as exc:
                raise SweepError(f"--engine-option {item}: {exc}") from None
        for e in Engine:  # options that conflict with each other (adasum, controller)
            try:
                engines.check_options(e, self.option_map(e))
            except SpecError as exc:
                raise SweepError(f"--engine-option: {exc}") from None

    def link_bps(self) -> int | None:
        """The emulated link's rate in bits/s, or None without one."""
        if not self.emulate_link:
            return None
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
            "--profile-steps": self.profile_steps,
            "--trace-steps": self.trace_steps,
        }
        pairs = tuple(a for k, v in flags.items() if v is not None for a in (k, str(v)))
        return pairs + (("--pin-cores",) if self.pin_cores else ())

    def option_map(self, engine: Engine) -> dict[str, str]:
        """`engine`'s options as a mapping (the last of a repeated key wins, as in the runner)."""
        return engine_options.parse(self.options(engine))

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
            wrong = [e for e in value if e not in {str(known) for known in Engine}]
            if wrong:
                raise SweepError(f"{name}: {engines.unknown(wrong[0])}")
            return tuple(Engine(e) for e in value)
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
