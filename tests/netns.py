"""Two 'hosts' on one machine: network namespaces joined by a veth pair.

Each namespace gets its own address on a private /24 chosen per test run, an
interface named `bench0` on both sides (as on a real cluster, where every node
has the same NIC name), and optionally an sshd so that horovodrun can reach it.
Everything is removed on exit. Needs root and `ip`; `available()` says why not.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

IFACE = "bench0"


def available() -> str | None:
    """None when namespaces can be made here, else the reason they cannot."""
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    probe = f"bench-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def sshd_path() -> str | None:
    for path in ("/usr/sbin/sshd", shutil.which("sshd")):
        if path and Path(path).exists():
            return path
    return None


@dataclasses.dataclass
class TwoHosts:
    addresses: list[str]
    remote_shell: str  # for --remote-shell: runs a command string in a host's namespace
    ssh_identity: str | None = None  # set when sshd runs in the second namespace

    @property
    def hosts(self) -> str:
        return ",".join(f"{a}:1" for a in self.addresses)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@contextlib.contextmanager
def two_hosts(with_sshd: bool = False) -> Iterator[TwoHosts]:
    subnet = f"10.213.{os.getpid() % 250 + 1}"
    addresses = [f"{subnet}.1", f"{subnet}.2"]
    names = [f"bench-{a}" for a in addresses]
    veth = [f"bv{os.getpid() % 100000}a", f"bv{os.getpid() % 100000}b"]
    tmp = Path(tempfile.mkdtemp(prefix="bench-netns-"))
    sshd: subprocess.Popen[bytes] | None = None
    try:
        for name in names:
            _ip("netns", "add", name)
        _ip("link", "add", veth[0], "type", "veth", "peer", "name", veth[1])
        for name, addr, dev in zip(names, addresses, veth, strict=True):
            _ip("link", "set", dev, "netns", name)
            _ip("-n", name, "link", "set", dev, "name", IFACE)
            _ip("-n", name, "addr", "add", f"{addr}/24", "dev", IFACE)
            _ip("-n", name, "link", "set", "lo", "up")
            _ip("-n", name, "link", "set", IFACE, "up")
        hosts = TwoHosts(addresses, "ip netns exec bench-{host} sh -c")
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
        shutil.rmtree(tmp, ignore_errors=True)


def _start_sshd(tmp: Path, namespace: str, address: str) -> subprocess.Popen[bytes]:
    """An sshd inside `namespace` that accepts only a key made for this run."""
    sshd = sshd_path()
    assert sshd, "caller checks sshd_path() first"
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
        raise RuntimeError(f"sshd did not start: {(tmp / 'sshd.log').read_text()}")
    return proc
