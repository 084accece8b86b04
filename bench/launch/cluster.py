"""Where a run's workers go: hosts, a cluster of them, and one host's part of a launch.

This machine is a one-host cluster (`Cluster.this_machine`), so single-node is the
one-host case of multi-node. Commands are always argv lists, never shell strings:
no user-provided value reaches a shell unquoted.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from pathlib import Path

from bench.core.errors import LaunchError

ROOT = Path(__file__).resolve().parents[2]  # the repository: every host runs from it


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
