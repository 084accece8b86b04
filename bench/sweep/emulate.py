"""A sweep over an emulated link: its cells spread over a shaped pair of namespaces."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

from bench import engines
from bench.launch import netns
from bench.sweep.config import SweepConfig


def needs_ssh(config: SweepConfig) -> bool:
    """Whether an engine of the sweep reaches other hosts by ssh (its pair needs an sshd)."""
    return any(engines.get(e).needs_ssh for e in config.engines)


def on_pair(config: SweepConfig, hosts: netns.TwoHosts) -> SweepConfig:
    """`config` with its cells spread over the namespace pair `hosts` (--hosts and co.)."""
    per = max(config.workers) // 2
    return dataclasses.replace(
        config,
        hosts=hosts.hosts_with(per),
        hostfile="",
        remote_shell=hosts.remote_shell,
        iface=netns.IFACE,
        ssh_identity=hosts.ssh_identity or "",
    ).validate()


def planned(config: SweepConfig) -> SweepConfig:
    """`config` on the pair it would make, without making it (for --dry-run)."""
    return on_pair(config, netns.planned(needs_ssh(config), config.link_bps()))


@contextlib.contextmanager
def emulated(config: SweepConfig) -> Iterator[SweepConfig]:
    """The namespace pair shaped to `config.emulate_link`, and `config` set to run on it.

    The pair is removed when the block ends, however it ends, with everything that
    ran inside it. An sshd is started in the second namespace only when an engine
    of the sweep needs one.
    """
    rate = config.link_bps()
    if rate is None:
        raise ValueError("emulated() needs a sweep with emulate_link set")
    with netns.shaped_pair(needs_ssh(config), rate) as hosts:
        yield on_pair(config, hosts)
