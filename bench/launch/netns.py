"""Two 'hosts' on one machine: network namespaces joined by a veth pair, optionally shaped.

Each namespace gets its own address on a private /24, an interface named `bench0`
on both sides (as on a real cluster, where every node has the same NIC name), and
optionally an sshd so that horovodrun can reach it. With a rate, each end's
egress goes through a token-bucket filter (`tc qdisc ... tbf`) with a bucket of two
frames of an MTU that grows with the rate (`link_shape`), which shapes both directions
of the link. Everything is removed on exit, also on Ctrl-C, SIGTERM
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
from typing import Any

import psutil

from bench.core.errors import LinkError
from bench.launch.cluster import Cluster, parse_hosts
from bench.launch.process import kill_tree, signals_held, stop_processes

IFACE = "bench0"
# `bench run --emulate-link`'s pair: one fixed subnet, so that the hosts a cell records
# (part of its resume key) are the same on every run.
SWEEP_SUBNET = "10.214.0"
# Namespace names: PREFIX<pid>-<address>; the pid tells a stale pair from a live one.
PREFIX = "benchns"
# The pair's folder (sshd keys and log): TMP_PREFIX<pid>-<random>, likewise.
TMP_PREFIX = "bench-netns-"


# How the link is shaped (`link_shape`). A real link serialises every frame at its
# rate, so a message takes its bytes over the rate from the first byte; tc tbf sends
# what its bucket holds at line speed, so the bucket must be small next to the messages
# timed: two frames (three from 2.8gbit). A veth hands tbf GSO packets of up to 64 KiB,
# which tbf cuts into MTU frames when they exceed its bucket. GSO stays on: with it
# off (gso_max_segs 1) TCP sends every frame on its own and a 40 KB Gloo allreduce at
# 500mbit took 3.4 ms instead of 0.8. The MTU grows with the rate instead, to bound
# the frames a second this machine handles (at 1500 bytes a full 500mbit link took
# about five times the CPU that 4000-byte frames take), and with it the bucket.
PACKET_S = 64e-6  # a full frame's time on the wire at the link's rate
MIN_MTU = 1500  # Ethernet's; below 188mbit every frame is this (and takes longer)
MAX_MTU = 65535  # a veth's largest
ETH_HEADER = 14  # tbf counts every frame with its Ethernet header
BUCKET_FRAMES = 2  # one frame to send, one of slack for a late qdisc run
# Once a 64 KiB GSO packet holds at most two frames (MTU above 21,845: from 2.8gbit),
# two frames fell short of the rate (86% at 2.9, 3, 5, 8 and 10gbit, 99% at 2, 2.5 and
# 2.7gbit, a TCP stream measured here) and three reach it (99%).
BIG_MTU = 65536 // 3
BIG_MTU_BUCKET_FRAMES = 3
# how long a packet may queue before tbf drops it: holds a TCP window's burst at these
# rates, yet keeps a standing queue from adding much to small-message latency
QUEUE_LATENCY = "10ms"
GSO = "on"  # left as the veth has it: tbf cuts GSO packets bigger than its bucket


@dataclasses.dataclass(frozen=True)
class LinkShape:
    """What `shape` sets on each end of the pair for one rate."""

    rate_bps: int
    mtu: int  # both ends' MTU
    burst_bytes: int  # tbf's bucket: what passes at line speed after an idle spell
    latency: str = QUEUE_LATENCY


def link_shape(rate_bps: int) -> LinkShape:
    """The MTU and tbf bucket for `rate_bps`: frames of PACKET_S at the rate (1500 to
    65,535 bytes of MTU), a bucket of BUCKET_FRAMES of them (BIG_MTU_BUCKET_FRAMES
    above BIG_MTU).

    The bucket's head start is burst / rate: 1.2 ms at 20mbit (two 1514-byte frames),
    128 us from 188mbit to 2.7gbit, 192 us from there to 8.2gbit, 157 us at 10gbit and
    less above. One frame to send, the rest slack for the tokens a late qdisc run
    would otherwise waste.
    """
    mtu = int(min(max(rate_bps * PACKET_S / 8, MIN_MTU), MAX_MTU))
    frames = BIG_MTU_BUCKET_FRAMES if mtu > BIG_MTU else BUCKET_FRAMES
    return LinkShape(rate_bps, mtu, frames * (mtu + ETH_HEADER))


def link_record(rate_bps: int) -> dict[str, Any]:
    """The record's `link` field for a run over a link emulated at `rate_bps`."""
    shaped = link_shape(rate_bps)
    return {
        "rate_bps": rate_bps,
        "emulated": True,
        "qdisc": "tbf",
        "burst_bytes": shaped.burst_bytes,
        "latency": shaped.latency,
        "mtu": shaped.mtu,
        "gso": GSO,
    }


def link_key(rate_bps: int) -> str:
    """A sweep cell's identity part for the link: its rate and how it was shaped, so that
    a link shaped otherwise (as before `mtu` was recorded) is another cell."""
    shaped = link_shape(rate_bps)
    return f"link={rate_bps} mtu={shaped.mtu} burst={shaped.burst_bytes}"


def link_for(labels: dict[str, Any]) -> dict[str, Any] | None:
    """The record's `link` for a run over an emulated link (label link_rate_bps, set by
    `bench run --emulate-link` and `bench collectives --emulate-link`), else None."""
    rate = labels.get("link_rate_bps")
    if isinstance(rate, int) and not isinstance(rate, bool) and rate > 0:
        return link_record(rate)
    return None


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
    """Delete namespace pairs whose creating process is gone (a SIGKILLed run's), and
    whatever still runs inside them, and that process's folder of keys and logs."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    gone = []
    for line in listed.splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.fullmatch(rf"{PREFIX}(\d+)-.*", name)
        if m and not _pid_alive(int(m.group(1))):
            _delete_namespace(name)
            gone.append(name)
    # a reused pid keeps a dead run's folder (a leak, never a live run's loss)
    for folder in Path(tempfile.gettempdir()).glob(f"{TMP_PREFIX}*"):
        m = re.fullmatch(rf"{TMP_PREFIX}(\d+)-.*", folder.name)
        if m and not _pid_alive(int(m.group(1))):
            shutil.rmtree(folder, ignore_errors=True)
    return gone


def namespace_processes(name: str) -> list[psutil.Process]:
    """Every process whose network namespace is `name` (`ip netns pids`)."""
    out = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout
    procs = []
    for pid in out.split():
        with contextlib.suppress(psutil.Error, ValueError):
            procs.append(psutil.Process(int(pid)))
    return procs


def _delete_namespace(name: str) -> None:
    """End every process inside `name`, then delete it (with its end of the veth pair).

    Deleting a namespace does not stop what runs in it: sshd's per-connection children
    and the workers they start are not under any launcher of ours.
    """
    stop_processes(namespace_processes(name), grace=3.0)
    subprocess.run(["ip", "netns", "del", name], capture_output=True)


def shape(namespace: str, rate_bps: int, iface: str = IFACE) -> None:
    """Shape `iface`'s egress inside `namespace` to `rate_bps` as `link_shape` says: its
    MTU (`ip link`), then a token-bucket filter (`tc qdisc`)."""
    shaped = link_shape(rate_bps)
    mtu = ["ip", "-n", namespace, "link", "set", "dev", iface, "mtu", str(shaped.mtu)]
    run = subprocess.run(mtu, capture_output=True, text=True)
    if run.returncode != 0:
        raise LinkError(f"setting {iface}'s MTU in {namespace} failed: {run.stderr.strip()}")
    argv = ["ip", "netns", "exec", namespace, "tc", "qdisc", "replace", "dev", iface, "root"]
    argv += ["tbf", "rate", f"{rate_bps}bit", "burst", str(shaped.burst_bytes)]
    argv += ["latency", shaped.latency]
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
    separate network stacks, so two pairs may use the same subnet. However the block
    ends (an error, Ctrl-C or SIGTERM at any phase, set-up included), every process
    inside the namespaces is ended before they are deleted.
    """
    pid = os.getpid()
    subnet = subnet or f"10.213.{pid % 250 + 1}"
    addresses = [f"{subnet}.1", f"{subnet}.2"]
    names = [f"{PREFIX}{pid}-{a}" for a in addresses]
    veth = [f"bv{pid % 1000000}a", f"bv{pid % 1000000}b"]
    tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{pid}-"))
    started: list[subprocess.Popen[bytes]] = []  # sshd, once it is started
    try:
        remove_stale()
        _make_pair(names, addresses, veth)
        if rate_bps is not None:
            for name in names:  # each end's egress: both directions
                shape(name, rate_bps)
        hosts = TwoHosts(addresses, f"ip netns exec {PREFIX}{pid}-{{host}} sh -c", None, rate_bps)
        if with_sshd:
            _start_sshd(tmp, names[1], addresses[1], started)
            hosts.ssh_identity = str(tmp / "client")
        yield hosts
    finally:
        for name in names:
            _delete_namespace(name)
        for proc in started:  # `ip netns exec` itself, should it still wait on sshd
            kill_tree(proc, grace=3.0)
        # a veth made before its ends moved into the namespaces would be left in ours
        subprocess.run(["ip", "link", "del", veth[0]], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def _make_pair(names: list[str], addresses: list[str], veth: list[str]) -> None:
    for name in names:
        _ip("netns", "add", name)
    _ip("link", "add", veth[0], "type", "veth", "peer", "name", veth[1])
    for name, addr, dev in zip(names, addresses, veth, strict=True):
        _ip("link", "set", dev, "netns", name)
        _ip("-n", name, "link", "set", dev, "name", IFACE)
        _ip("-n", name, "addr", "add", f"{addr}/24", "dev", IFACE)
        _ip("-n", name, "link", "set", "lo", "up")
        _ip("-n", name, "link", "set", IFACE, "up")


# How long an sshd may take to listen before the pair is given up.
SSHD_START_S = 10.0


def _sshd_argv(sshd: str, namespace: str, address: str, tmp: Path) -> list[str]:
    """sshd in the foreground inside `namespace`, logging to stderr, with its host key,
    authorized keys and pid file in `tmp`."""
    options = [
        f"ListenAddress={address}",
        f"AuthorizedKeysFile={tmp / 'authorized_keys'}",
        f"PidFile={tmp / 'sshd.pid'}",
        "PermitRootLogin=prohibit-password",
        "UsePAM=no",
        "StrictModes=no",
    ]
    argv = ["ip", "netns", "exec", namespace, sshd, "-D", "-e", "-h", str(tmp / "hostkey")]
    return argv + [word for option in options for word in ("-o", option)]


def _start_sshd(
    tmp: Path, namespace: str, address: str, started: list[subprocess.Popen[bytes]]
) -> None:
    """An sshd inside `namespace` that accepts only a key made for this run; appended to
    `started` as soon as it exists, so that the caller stops it whatever happens next."""
    sshd = sshd_path()
    if not sshd:
        raise LinkError(
            "horovodrun reaches the second host by ssh and no sshd is installed "
            "(apt-get install openssh-server), or leave horovod out of --engines"
        )
    _make_keys(tmp)
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
    with open(tmp / "sshd.log", "wb") as log, signals_held():
        proc = subprocess.Popen(
            _sshd_argv(sshd, namespace, address, tmp),
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,  # Ctrl-C reaches bench, which stops sshd in order
        )
        started.append(proc)
    if not _listening(proc, namespace, address):
        why = "exited" if proc.poll() is not None else f"did not listen within {SSHD_START_S:g}s"
        log_text = (tmp / "sshd.log").read_text(errors="replace").strip()
        raise LinkError(f"sshd in {namespace} {why} on {address}:22: {log_text or 'no output'}")


def _listening(proc: subprocess.Popen[bytes], namespace: str, address: str) -> bool:
    """Whether sshd accepts connections on address:22 before SSHD_START_S passes."""
    deadline = time.monotonic() + SSHD_START_S
    while time.monotonic() < deadline and proc.poll() is None:
        probe = subprocess.run(
            [
                *("ip", "netns", "exec", namespace, sys.executable, "-c"),
                f"import socket; socket.create_connection(({address!r}, 22), 1)",
            ],
            capture_output=True,
        )
        if probe.returncode == 0:
            return True
        time.sleep(0.2)
    return False


def _make_keys(tmp: Path) -> None:
    """The host key and the one client key this sshd accepts."""
    for key in ("hostkey", "client"):
        argv = ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / key)]
        try:
            subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60)
        except FileNotFoundError:
            raise LinkError(
                "ssh-keygen is not installed (apt-get install openssh-client); horovodrun "
                "reaches the second namespace by ssh"
            ) from None
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            why = (getattr(exc, "stderr", "") or str(exc)).strip()
            raise LinkError(f"ssh-keygen could not make a key in {tmp}: {why}") from None
    (tmp / "authorized_keys").write_text((tmp / "client.pub").read_text())
    (tmp / "authorized_keys").chmod(0o600)


def check_can_emulate() -> None:
    """Raise LinkError, naming --emulate-link, when this process cannot emulate a link."""
    why = available(shaping=True)
    if why:
        raise LinkError(
            f"--emulate-link cannot run here: {why} (it makes two network namespaces and "
            "shapes their link with tc); run bench as root, or drop --emulate-link"
        )


def cluster(hosts: TwoHosts, workers: int) -> Cluster:
    """The pair as a launch cluster for up to `workers` workers (half on each host)."""
    return Cluster(
        parse_hosts(hosts.hosts_with(max(workers // 2, 1))),
        iface=IFACE,
        remote_shell=hosts.remote_shell,
        ssh_identity=hosts.ssh_identity,
    )


def planned(with_sshd: bool, rate_bps: int | None) -> TwoHosts:
    """The pair `two_hosts(subnet=SWEEP_SUBNET)` would make, without making it."""
    addresses = [f"{SWEEP_SUBNET}.1", f"{SWEEP_SUBNET}.2"]
    key = "<key-made-at-run-time>" if with_sshd else None
    shell = f"ip netns exec {PREFIX}{os.getpid()}-{{host}} sh -c"
    return TwoHosts(addresses, shell, key, rate_bps)


@contextlib.contextmanager
def shaped_pair(with_sshd: bool, rate_bps: int) -> Iterator[TwoHosts]:
    """`bench`'s pair: checked first (root, tc, sshd for horovod), removed however it ends."""
    check_can_emulate()
    if with_sshd and sshd_path() is None:
        raise LinkError(
            "--emulate-link with an engine whose launcher reaches other hosts by ssh "
            "(horovodrun) needs an sshd: apt-get install openssh-server, or leave that "
            "engine out of --engines"
        )
    with two_hosts(with_sshd=with_sshd, rate_bps=rate_bps, subnet=SWEEP_SUBNET) as hosts:
        yield hosts
