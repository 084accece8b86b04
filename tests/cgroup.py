"""A cgroup with a CPU quota, for commands that must see fewer CPUs than the machine has.

Used by the tests of `usable_cpus` and by the stability study's quota mode
(experiments/stability/). Root only: cgroup v2 (`cpu.max`, the cpu controller enabled
below the root) or v1 (the cpu hierarchy's `cpu.cfs_quota_us`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000


def why_not() -> str | None:
    """Why no quota cgroup can be made here; None when one can."""
    if os.geteuid() != 0:
        return "making a cgroup needs root"
    if (ROOT / "cgroup.controllers").exists():
        if "cpu" not in (ROOT / "cgroup.controllers").read_text().split():
            return "cgroup v2 without the cpu controller"
        return None
    if not (ROOT / "cpu" / "cpu.cfs_quota_us").exists():
        return "neither cgroup v2 nor a v1 cpu hierarchy under /sys/fs/cgroup"
    return None


@contextlib.contextmanager
def cpu_quota(cpus: float, name: str) -> Iterator[list[str]]:
    """A cgroup `name` allowed `cpus` CPUs; yields the argv prefix that runs a command in it.

    The group is removed at the end, once the commands run in it have exited.
    """
    with quota_group(cpus, name) as procs:
        # the child moves itself into the group, then becomes the command
        yield ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "in-cgroup"]


@contextlib.contextmanager
def quota_group(cpus: float, name: str) -> Iterator[Path]:
    """A cgroup `name` allowed `cpus` CPUs; yields its `cgroup.procs` file, to which
    writing a process id moves that process (all its threads) into the group."""
    problem = why_not()
    if problem:
        raise RuntimeError(f"no CPU quota cgroup: {problem}")
    quota = max(int(PERIOD_US * cpus), PERIOD_US // 100)
    if (ROOT / "cgroup.controllers").exists():
        control = ROOT / "cgroup.subtree_control"
        if "cpu" not in control.read_text().split():
            control.write_text("+cpu\n")  # so that the child group has cpu.max
        group = ROOT / name
        group.mkdir(exist_ok=True)
        (group / "cpu.max").write_text(f"{quota} {PERIOD_US}\n")
    else:
        group = ROOT / "cpu" / name
        group.mkdir(exist_ok=True)
        (group / "cpu.cfs_period_us").write_text(f"{PERIOD_US}\n")
        (group / "cpu.cfs_quota_us").write_text(f"{quota}\n")
    try:
        yield group / "cgroup.procs"
    finally:
        with contextlib.suppress(OSError):
            group.rmdir()  # fails while a process is still in it: the kernel keeps it
