"""Launch plans: the exact argv each engine's own launcher needs for one run.

Always argv lists, never shell strings: no user-provided value reaches a shell.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.engines import Engine

ROOT = Path(__file__).resolve().parent.parent
COLLECTIVES_SCRIPT = ROOT / "runners" / "collectives.py"
COLLECTIVES_FILE = "collectives.jsonl"  # beside runs.jsonl: the collective records
# Message sizes runners/collectives.py times by default: 4 KiB .. 64 MiB, x4.
COLLECTIVE_SIZES = [4 * 1024 * 4**i for i in range(8)]


class LaunchError(RuntimeError):
    """A launcher that cannot be found or a plan that cannot be placed."""


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
def horovod_controllers(python: str | None = None) -> frozenset[str]:
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


def launch_argv(
    engine: Engine,
    nproc: int,
    runner_args: list[str],
    *,
    log_dir: Path | None = None,
    python: str | None = None,
    script: Path | None = None,
    controller: str = "gloo",
    options: Mapping[str, str] | None = None,
) -> list[str]:
    """argv that starts `nproc` workers of `engine` on this host with its own launcher.

    `log_dir`, when given, receives one log file per rank (each launcher names them its
    own way: torchrun `<run>/attempt_0/<rank>/stdout.log`, horovodrun
    `rank.<n>/stdout`, paddle `workerlog.<n>`). `options` are the run's engine options
    (Horovod's controller among them); `controller` alone sets Horovod's.
    """
    if nproc < 1:
        raise LaunchError(f"number of workers must be >= 1, got {nproc}")
    (node,) = _engine_launch(
        engine, Cluster.this_machine(nproc), nproc, runner_args, log_dir, python, script,
        _with_controller(options, controller),
    )  # fmt: skip
    return node.argv


def _with_controller(options: Mapping[str, str] | None, controller: str) -> dict[str, str]:
    out = dict(options or {})
    if controller != "gloo":
        out.setdefault("controller", controller)
    return out


def _engine_launch(
    engine: Engine,
    cluster: Cluster,
    workers: int,
    runner_args: list[str],
    log_dir: Path | None,
    python: str | None,
    script: Path | None,
    options: Mapping[str, str],
) -> list[NodeLaunch]:
    # The registry builds on this module's Cluster and Host, hence imported here.
    from bench import engines

    return engines.build_launch(
        engine,
        cluster,
        workers,
        runner_args,
        log_dir=log_dir,
        python=python or sys.executable,
        script=script,
        options=options,
    )


# --- multi-node -----------------------------------------------------------------------

DEFAULT_REMOTE_SHELL = "ssh -o BatchMode=yes {host}"


@dataclasses.dataclass(frozen=True)
class Host:
    """One machine of a multi-node launch: how to reach it and how many workers it runs."""

    name: str
    slots: int

    def __str__(self) -> str:
        return f"{self.name}:{self.slots}"


def _host(entry: str, where: str) -> Host:
    name, sep, slots = entry.strip().partition(":")
    hostfile_style = re.fullmatch(r"(\S+)\s+slots\s*=\s*(\S+)", entry.strip())  # "node1 slots=4"
    if hostfile_style:
        name, sep, slots = hostfile_style.group(1), ":", hostfile_style.group(2)
    name = name.strip()
    if not name or not sep or not slots.strip().isdigit() or int(slots) < 1:
        raise LaunchError(
            f"{where}: host entry {entry.strip()!r} must look like HOST:SLOTS (or 'HOST slots=N' "
            "in a hostfile) with SLOTS >= 1, e.g. node1:2"
        )
    if len(name) > 253 or not _HOST_NAME.fullmatch(name):
        # Not just shell metacharacters: a name starting with '-' would reach ssh (or
        # any remote shell) as an option, e.g. -oProxyCommand=...
        raise LaunchError(
            f"{where}: host name {name!r} has characters a host name cannot have or starts "
            "with '-' or '.'; give a host name or IPv4 address (letters, digits, '-', '_', '.')"
        )
    return Host(name, int(slots))


# RFC 1123 labels (plus '_', which some internal names use) joined by dots; IPv4
# addresses match too. A label never starts or ends with '-'.
_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOST_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")


def parse_hosts(text: str, where: str = "--hosts") -> tuple[Host, ...]:
    """'node1:2,node2:2' as hosts; the first is the master (rank 0 and the rendezvous)."""
    hosts = tuple(_host(part, where) for part in text.split(",") if part.strip())
    return _check_hosts(hosts, where)


def read_hostfile(path: str | Path) -> tuple[Host, ...]:
    """A hostfile: one 'HOST slots=N' or 'HOST:N' per line, '#' comments (Horovod/MPI style)."""
    p = Path(path)
    if not p.is_file():
        raise LaunchError(f"hostfile {p} not found")
    lines = [line.split("#", 1)[0] for line in p.read_text().splitlines()]
    hosts = tuple(_host(line, f"hostfile {p}") for line in lines if line.strip())
    return _check_hosts(hosts, f"hostfile {p}")


def _check_hosts(hosts: tuple[Host, ...], where: str) -> tuple[Host, ...]:
    if not hosts:
        raise LaunchError(f"{where} names no hosts; give HOST:SLOTS,HOST:SLOTS")
    names = [h.name for h in hosts]
    if len(set(names)) != len(names):
        raise LaunchError(f"{where} names a host twice: {', '.join(names)}")
    return hosts


@dataclasses.dataclass(frozen=True)
class Cluster:
    """The hosts of a multi-node launch and how to start a command on each of them.

    `remote_shell` is the prefix that runs one shell command string on a host; `{host}`
    is replaced by the host name. The default is ssh; tests use `ip netns exec`.
    Every host must see this repository and its .venv at the same path.
    """

    hosts: tuple[Host, ...]
    port: int = 29400  # rendezvous port on the first host
    iface: str | None = None  # network interface the collectives must use
    remote_shell: str = DEFAULT_REMOTE_SHELL
    # this machine only: launchers start their workers here, with a rendezvous of their own
    local: bool = False
    # for horovodrun, which reaches the other hosts by ssh itself
    ssh_port: int | None = None
    ssh_identity: str | None = None

    def __post_init__(self) -> None:
        if "{host}" not in self.remote_shell:
            raise LaunchError(
                f"remote shell {self.remote_shell!r} must contain {{host}}, where the host "
                "name goes, e.g. 'ssh -o BatchMode=yes {host}'"
            )
        if not 1 <= self.port <= 65535:
            raise LaunchError(f"rendezvous port must be 1..65535, got {self.port}")

    @classmethod
    def this_machine(cls, workers: int) -> Cluster:
        """This machine as a one-host cluster of `workers` slots (single-node runs)."""
        return cls((Host("localhost", workers),), local=True)

    @property
    def master(self) -> Host:
        return self.hosts[0]

    def placement(self, workers: int) -> int:
        """Workers per host for a run of `workers` spread evenly over every host."""
        n = len(self.hosts)
        per, rest = divmod(workers, n)
        fewest = min(h.slots for h in self.hosts)
        if rest or per < 1 or per > fewest:
            raise LaunchError(
                f"{workers} workers cannot be spread evenly over {n} hosts "
                f"({', '.join(map(str, self.hosts))}): use a multiple of {n} up to {n * fewest}"
            )
        return per

    def env(self) -> dict[str, str]:
        """Variables every worker needs on every host."""
        if not self.iface:
            return {}
        # torch's Gloo and NCCL, and Paddle's Gloo (which reads the same variable).
        return {"GLOO_SOCKET_IFNAME": self.iface, "NCCL_SOCKET_IFNAME": self.iface}

    def remote(self, host: Host, argv: list[str]) -> list[str]:
        """argv that runs `argv` on `host` through the remote shell, in this repository."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env().items()))
        command = f"cd {shlex.quote(str(ROOT))} && exec env {env} {shlex.join(argv)}"
        parts = shlex.split(self.remote_shell)
        # ssh takes its host after "--", so that no host can ever read as an option
        # (host names are checked too; this is the second fence).
        if Path(parts[0]).name == "ssh" and "{host}" in parts:
            at = parts.index("{host}")
            if "--" not in parts[:at]:
                parts.insert(at, "--")
        prefix = [part.replace("{host}", host.name) for part in parts]
        return [*prefix, command]


@dataclasses.dataclass(frozen=True)
class NodeLaunch:
    """One host's part of a multi-node launch: `argv` runs here and reaches `host`."""

    host: Host
    argv: list[str]  # the full local command (remote shell included)
    command: list[str]  # what runs on the host itself


def multinode_launch(
    engine: Engine,
    cluster: Cluster,
    workers: int,
    runner_args: list[str],
    *,
    log_dir: Path | None = None,
    python: str | None = None,
    script: Path | None = None,
    controller: str = "gloo",
    options: Mapping[str, str] | None = None,
) -> list[NodeLaunch]:
    """Each engine's own multi-node launch of `workers` spread evenly over the cluster.

    torchrun and Paddle's launcher run once per host with the node's rank; horovodrun
    runs once, on the first host, and starts the other hosts' workers itself (by ssh),
    over Gloo: the MPI controller is tested on one host only. The same builder as
    `launch_argv`'s, which is this on a one-host cluster.
    """
    return _engine_launch(
        engine, cluster, workers, runner_args, log_dir, python, script,
        _with_controller(options, controller),
    )  # fmt: skip
