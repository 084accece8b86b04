"""Two 'hosts' on one machine for the tests: bench/netns.py's namespace pair.

Kept as a module of its own so the multi-node tests read as before; the pair (and
its shaping) lives in bench/netns.py, where `bench run --emulate-link` uses it too.
"""

from __future__ import annotations

from bench.launch.netns import IFACE, TwoHosts, available, sshd_path, two_hosts

__all__ = ["IFACE", "TwoHosts", "available", "sshd_path", "two_hosts"]
