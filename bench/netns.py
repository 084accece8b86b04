"""Two 'hosts' on one machine: network namespaces joined by a veth pair, optionally shaped.

Each namespace gets its own address on a private /24, an interface named `bench0`
on both sides (as on a real cluster, where every node has the same NIC name), and
optionally an sshd so that horovodrun can reach it. With a rate, each end's
egress goes through a token-bucket filter (`tc qdisc ... tbf`), which shapes both
directions of the link. Everything is removed on exit, also on Ctrl-C, SIGTERM
(which `bench` turns into an exception) or a failed set-up; namespaces that a
killed run (SIGKILL) left behind are removed by the next run. Needs root, `ip`
and, for shaping, `tc`; `available()` says why not.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench import launch
    from bench.sweep import SweepConfig

IFACE = "bench0"
# `bench run --emulate-link`'s pair: one fixed subnet, so that the hosts a cell records
# (part of its resume key) are the same on every run.
SWEEP_SUBNET = "10.214.0"
# Namespace names: PREFIX<pid>-<address>; the pid tells a stale pair from a live one.
PREFIX = "benchns"
# Rates below this would make a training run's start-up alone take minutes.
MIN_RATE_BPS = 1_000_000
_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


class LinkError(ValueError):
    """A link that cannot be emulated here; the message says what to do."""


def parse_rate(text: str) -> int:
    """Bits per second from a tc-style rate: '200mbit', '1.5gbit', '25gbit' (SI, x1000).

    Only bit units are taken: tc's 'bps' means bytes per second, a factor of 8 that a
    user should never have to guess, so it is refused with the bit spelling to use.
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)bit\s*", str(text), re.IGNORECASE)
    if not m:
        raise LinkError(
            f"--emulate-link: rate {text!r} is not understood; give bits per second with a "
            "unit, e.g. 200mbit, 1gbit or 25gbit (k/m/g/t = x1000)"
        )
    bps = round(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if bps < MIN_RATE_BPS:
        raise LinkError(f"--emulate-link: rate {text!r} is below 1mbit; give 1mbit or more")
    return bps


def format_rate(bps: float) -> str:
    """'200mbit', '25gbit', '1.5gbit': the shortest tc-style spelling of a rate."""
    for unit, size in (("tbit", 10**12), ("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bps >= size:
            return f"{bps / size:g}{unit}"
    return f"{bps:g}bit"


def tbf_params(rate_bps: int) -> tuple[int, str]:
    """(burst bytes, latency) of the token-bucket filter for `rate_bps`.

    burst: at least 64 KiB + headers, because a veth hands tbf GSO packets of up to
    64 KiB and a smaller bucket makes tbf cut every one of them up (CPU the workers
    need); and at least 1 ms worth of the rate, because tokens are refilled when the
    qdisc runs and on a loaded host it may not run for about that long, so a smaller
    bucket would waste tokens and undershoot the rate at 10 gbit and above.
    latency (how long a packet may queue before tbf drops it): 10 ms holds a TCP
    window's burst at these rates without drops, yet keeps a standing queue from
    adding much to the small-message latency that `bench collectives` measures.
    """
    burst = max(64 * 1024 + 2048, rate_bps // 8 // 1000)
    return burst, "10ms"


def link_record(rate_bps: int) -> dict[str, Any]:
    """The record's `link` field for a run over a link emulated at `rate_bps`."""
    burst, latency = tbf_params(rate_bps)
    return {
        "rate_bps": rate_bps,
        "emulated": True,
        "qdisc": "tbf",
        "burst_bytes": burst,
        "latency": latency,
    }


def available(shaping: bool = False) -> str | None:
    """None when namespaces (and with `shaping`, tbf) can be made here, else why not."""
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    for tool in ("ip", *(("tc",) if shaping else ())):
        if shutil.which(tool) is None:
            return f"the {tool} command (iproute2) is not installed"
    probe = f"{PREFIX}{os.getpid()}-probe"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def sshd_path() -> str | None:
    """The sshd binary horovodrun's second host needs, or None."""
    for path in ("/usr/sbin/sshd", shutil.which("sshd")):
        if path and Path(path).exists():
            return path
    return None


@dataclasses.dataclass
class TwoHosts:
    """The pair as `bench run --hosts` options take it."""

    addresses: list[str]
    remote_shell: str  # for --remote-shell: runs a command string in a host's namespace
    ssh_identity: str | None = None  # set when sshd runs in the second namespace
    rate_bps: int | None = None  # the shaped rate, both directions; None: unshaped

    @property
    def hosts(self) -> str:
        return ",".join(f"{a}:1" for a in self.addresses)

    def hosts_with(self, slots: int) -> str:
        """--hosts for `slots` workers on each of the two hosts."""
        return ",".join(f"{a}:{slots}" for a in self.addresses)

    def namespace(self, i: int) -> str:
        return self.remote_shell.split()[3].replace("{host}", self.addresses[i])


def _ip(*args: str) -> None:
    run = subprocess.run(["ip", *args], capture_output=True, text=True)
    if run.returncode != 0:
        raise LinkError(f"ip {' '.join(args)} failed: {run.stderr.strip()}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale() -> list[str]:
    """Delete namespace pairs whose creating process is gone (a SIGKILLed run's)."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    gone = []
    for line in listed.splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.fullmatch(rf"{PREFIX}(\d+)-.*", name)
        if m and not _pid_alive(int(m.group(1))):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
            gone.append(name)
    return gone


def shape(namespace: str, rate_bps: int, iface: str = IFACE) -> None:
    """Put a token-bucket filter at `rate_bps` on `iface`'s egress inside `namespace`."""
    burst, latency = tbf_params(rate_bps)
    argv = ["ip", "netns", "exec", namespace, "tc", "qdisc", "replace", "dev", iface, "root"]
    argv += ["tbf", "rate", f"{rate_bps}bit", "burst", str(burst), "latency", latency]
    run = subprocess.run(argv, capture_output=True, text=True)
    if run.returncode != 0:
        raise LinkError(
            f"shaping {iface} in {namespace} failed ({' '.join(argv[4:])}): "
            f"{run.stderr.strip()}; this kernel needs the sch_tbf module"
        )


@contextlib.contextmanager
def two_hosts(
    with_sshd: bool = False, rate_bps: int | None = None, subnet: str | None = None
) -> Iterator[TwoHosts]:
    """Two namespaces joined by a veth pair, shaped to `rate_bps` when given; removed on exit.

    `subnet` (three octets) defaults to one derived from the pid; namespaces are
    separate network stacks, so two pairs may use the same subnet.
    """
    pid = os.getpid()
    subnet = subnet or f"10.213.{pid % 250 + 1}"
    addresses = [f"{subnet}.1", f"{subnet}.2"]
    names = [f"{PREFIX}{pid}-{a}" for a in addresses]
    veth = [f"bv{pid % 1000000}a", f"bv{pid % 1000000}b"]
    tmp = Path(tempfile.mkdtemp(prefix="bench-netns-"))
    sshd: subprocess.Popen[bytes] | None = None
    try:
        remove_stale()
        for name in names:
            _ip("netns", "add", name)
        _ip("link", "add", veth[0], "type", "veth", "peer", "name", veth[1])
        for name, addr, dev in zip(names, addresses, veth, strict=True):
            _ip("link", "set", dev, "netns", name)
            _ip("-n", name, "link", "set", dev, "name", IFACE)
            _ip("-n", name, "addr", "add", f"{addr}/24", "dev", IFACE)
            _ip("-n", name, "link", "set", "lo", "up")
            _ip("-n", name, "link", "set", IFACE, "up")
        if rate_bps is not None:
            for name in names:  # each end's egress: both directions
                shape(name, rate_bps)
        hosts = TwoHosts(addresses, f"ip netns exec {PREFIX}{pid}-{{host}} sh -c", None, rate_bps)
        if with_sshd:
            sshd = _start_sshd(tmp, names[1], addresses[1])
            hosts.ssh_identity = str(tmp / "client")
        yield hosts
    finally:
        if sshd is not None:
            sshd.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                sshd.wait(timeout=5)
        for name in names:  # deleting a namespace deletes its end of the veth pair
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        # a veth made before its ends moved into the namespaces would be left in ours
        subprocess.run(["ip", "link", "del", veth[0]], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def _start_sshd(tmp: Path, namespace: str, address: str) -> subprocess.Popen[bytes]:
    """An sshd inside `namespace` that accepts only a key made for this run."""
    sshd = sshd_path()
    if not sshd:
        raise LinkError(
            "horovodrun reaches the second host by ssh and no sshd is installed "
            "(apt-get install openssh-server), or leave horovod out of --engines"
        )
    for key in ("hostkey", "client"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / key)], check=True
        )
    (tmp / "authorized_keys").write_text((tmp / "client.pub").read_text())
    (tmp / "authorized_keys").chmod(0o600)
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
    proc = subprocess.Popen(
        [
            "ip", "netns", "exec", namespace, sshd, "-D", "-e",
            "-o", f"ListenAddress={address}",
            "-h", str(tmp / "hostkey"),
            "-o", f"AuthorizedKeysFile={tmp / 'authorized_keys'}",
            "-o", f"PidFile={tmp / 'sshd.pid'}",
            "-o", "PermitRootLogin=prohibit-password",
            "-o", "UsePAM=no",
            "-o", "StrictModes=no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp / "sshd.log", "wb"),  # noqa: SIM115 - lives as long as sshd
        start_new_session=True,  # Ctrl-C reaches bench, which stops sshd in order
    )  # fmt: skip
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        probe = subprocess.run(
            [
                *("ip", "netns", "exec", namespace, sys.executable, "-c"),
                f"import socket; socket.create_connection(({address!r}, 22), 1)",
            ],
            capture_output=True,
        )
        if probe.returncode == 0 or proc.poll() is not None:
            break
        time.sleep(0.2)
    if proc.poll() is not None:
        raise LinkError(f"sshd did not start: {(tmp / 'sshd.log').read_text()}")
    return proc


def check_can_emulate() -> None:
    """Raise LinkError, naming --emulate-link, when this process cannot emulate a link."""
    why = available(shaping=True)
    if why:
        raise LinkError(
            f"--emulate-link cannot run here: {why} (it makes two network namespaces and "
            "shapes their link with tc); run bench as root, or drop --emulate-link"
        )


def sweep_config(config: SweepConfig, hosts: TwoHosts) -> SweepConfig:
    """`config` with its cells spread over the namespace pair `hosts` (--hosts and co.)."""
    per = max(config.workers) // 2
    return dataclasses.replace(
        config,
        hosts=hosts.hosts_with(per),
        hostfile="",
        remote_shell=hosts.remote_shell,
        iface=IFACE,
        ssh_identity=hosts.ssh_identity or "",
    ).validate()


def cluster(hosts: TwoHosts, workers: int) -> launch.Cluster:
    """The pair as a launch cluster for up to `workers` workers (half on each host)."""
    from bench import launch

    return launch.Cluster(
        launch.parse_hosts(hosts.hosts_with(max(workers // 2, 1))),
        iface=IFACE,
        remote_shell=hosts.remote_shell,
        ssh_identity=hosts.ssh_identity,
    )


def planned_hosts(config: SweepConfig) -> TwoHosts:
    """The pair a sweep would make, without making it (for --dry-run)."""
    from bench.spec import Engine

    return planned(Engine.HOROVOD in config.engines, config.link_bps())


def planned(with_sshd: bool, rate_bps: int | None) -> TwoHosts:
    """The pair `two_hosts(subnet=SWEEP_SUBNET)` would make, without making it."""
    addresses = [f"{SWEEP_SUBNET}.1", f"{SWEEP_SUBNET}.2"]
    key = "<key-made-at-run-time>" if with_sshd else None
    shell = f"ip netns exec {PREFIX}{os.getpid()}-{{host}} sh -c"
    return TwoHosts(addresses, shell, key, rate_bps)


@contextlib.contextmanager
def emulated(config: SweepConfig) -> Iterator[SweepConfig]:
    """The namespace pair shaped to `config.emulate_link`, and `config` set to run on it.

    The pair is removed when the block ends, however it ends. horovodrun needs an sshd
    in the second namespace, started only when Horovod is among the engines.
    """
    from bench.spec import Engine

    rate = config.link_bps()
    assert rate is not None, "callers check config.emulate_link first"
    with shaped_pair(Engine.HOROVOD in config.engines, rate) as hosts:
        yield sweep_config(config, hosts)


@contextlib.contextmanager
def shaped_pair(with_sshd: bool, rate_bps: int) -> Iterator[TwoHosts]:
    """`bench`'s pair: checked first (root, tc, sshd for horovod), removed however it ends."""
    check_can_emulate()
    if with_sshd and sshd_path() is None:
        raise LinkError(
            "--emulate-link with horovod needs an sshd (horovodrun reaches the second "
            "namespace by ssh): apt-get install openssh-server, or leave horovod out of --engines"
        )
    with two_hosts(with_sshd=with_sshd, rate_bps=rate_bps, subnet=SWEEP_SUBNET) as hosts:
        yield hosts
