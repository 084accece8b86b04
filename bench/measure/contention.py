"""What else used the CPUs while a run was measured: contention is measured, not guessed.

Linux only (/proc/stat): the machine's busy CPU time over the measured period, minus
the CPU time of the run's own processes (the launcher and everything under it),
is what other processes took. Steal time is what the hypervisor gave to other
guests. A run is flagged `contended` when others averaged more than
OTHER_CORES_LIMIT cores or steal exceeded STEAL_LIMIT of the CPU time: on a
machine with few cores, Horovod's background thread and gloo's polling compete
with any such process, and the engines are not hurt equally.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import sys
import time
from typing import Any

import psutil

from bench.core import machine

OTHER_CORES_LIMIT = 0.2  # cores used on average by other processes
STEAL_LIMIT = 0.02  # share of CPU time stolen by the hypervisor
BUSY_WARN_CORES = 0.25  # `bench run` warns above this, sampled before it starts
LAUNCHERS = ("horovodrun", "torchrun", "torch.distributed.run", "paddle.distributed.launch")


@dataclasses.dataclass(frozen=True)
class Snapshot:
    wall: float  # time.monotonic()
    busy_s: float  # all CPUs: user, nice, system, irq, softirq (guest time is inside user)
    steal_s: float
    total_s: float  # every field, idle included
    tree_cpu_s: float | None  # CPU seconds of the run's own process tree
    held: Held | None = None  # this thread's and process's own counters


@dataclasses.dataclass(frozen=True)
class Held:
    """What says whether this thread was held back from outside its process: its
    run-queue delay (ready to run, not running: a CPU quota throttling it, another
    process on its core), the CPU of its process and of itself (the difference is what
    its own other threads ran meanwhile, which holds it back from inside), and what its
    cgroup's CPU quota throttled. Linux; None where the kernel does not keep them."""

    run_delay_s: float
    process_s: float
    thread_s: float
    throttled_s: float | None

    @classmethod
    def now(cls) -> Held | None:
        delay = run_delay_s()
        if delay is None:
            return None
        return cls(delay, time.process_time(), time.thread_time(), machine.cgroup_throttled_s())

    def since(self, start: Held, wall: float) -> dict[str, float | None]:
        own_threads = (self.process_s - start.process_s) - (self.thread_s - start.thread_s)
        held = max(0.0, self.run_delay_s - start.run_delay_s - own_threads)
        throttled = (
            None
            if self.throttled_s is None or start.throttled_s is None
            else 1e3 * (self.throttled_s - start.throttled_s)
        )
        return {"held_share": held / wall, "throttled_ms": throttled}


SCHEDSTAT = "/proc/thread-self/schedstat"


def run_delay_s() -> float | None:
    """This thread's run-queue delay so far, in seconds (Linux's schedstat, second
    field); None where the kernel does not keep it."""
    try:
        with open(SCHEDSTAT) as fh:
            return int(fh.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def _proc_stat() -> tuple[float, float, float] | None:
    try:
        with open("/proc/stat") as fh:
            fields = fh.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    ticks = [int(v) for v in fields[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    user, nice, system, _idle, _iowait, irq, softirq, steal = (ticks + [0] * 8)[:8]
    # guest and guest_nice (fields 9-10) are already counted in user and nice
    total = sum(ticks[:8])
    return (user + nice + system + irq + softirq) / hz, steal / hz, total / hz


def run_tree_root() -> int:
    """PID whose process tree is this run: the launcher above this rank, else this process."""
    try:
        proc: Any = psutil.Process()
        for parent in proc.parents():
            cmd = " ".join(parent.cmdline())
            if any(name in cmd for name in LAUNCHERS):
                proc = parent
        return int(proc.pid)
    except Exception:  # a parent already gone: count this process only
        return os.getpid()


def run_label(argv: list[str] | None = None) -> str | None:
    """This launch's `attempt=` label from the command line (`bench run` gives every rank one)."""
    argv = sys.argv if argv is None else argv
    for flag, value in itertools.pairwise(argv):
        if flag == "--label" and value.startswith("attempt="):
            return value
    return None


def _run_processes(root: int, label: str | None) -> list[Any]:
    """The run's processes: the tree under `root`, and every process whose command line
    carries the run's label with its children. The label finds the ranks that the
    local tree does not hold: those another host's launcher started in a second
    network namespace of this machine (--emulate-link), or an sshd's child."""
    procs: dict[int, Any] = {}
    tops = [psutil.Process(root)]
    if label is not None:
        for proc in psutil.process_iter(["cmdline"]):
            if label in (proc.info.get("cmdline") or []):
                tops.append(proc)
    for top in tops:
        try:
            for proc in [top, *top.children(recursive=True)]:
                procs.setdefault(proc.pid, proc)
        except psutil.Error:
            continue  # ended while listing
    return list(procs.values())


def _tree_cpu(root: int, label: str | None = None) -> float | None:
    try:
        total = 0.0
        for proc in _run_processes(root, label):
            try:
                t = proc.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                continue  # ended between listing and reading
        return total
    except Exception:
        return None


def snapshot(root: int, label: str | None = None) -> Snapshot | None:
    """Machine and run CPU counters now; None where /proc/stat is unreadable.

    The run is the process tree under `root` plus the processes carrying `label`
    (default: this process's own `attempt=` label, see `run_label`)."""
    stat = _proc_stat()
    if stat is None:
        return None
    return Snapshot(time.monotonic(), *stat, _tree_cpu(root, label or run_label()), Held.now())


def causes(other_cores: object, steal_fraction: object) -> list[str]:
    """Why a measure counts as contention ("other processes", "steal"); empty when it
    does not. Values that are not numbers (a damaged record) count for nothing."""

    def over(value: object, limit: float) -> bool:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        return value > limit

    found = [("other processes", over(other_cores, OTHER_CORES_LIMIT))]
    found.append(("steal", over(steal_fraction, STEAL_LIMIT)))
    return [cause for cause, hit in found if hit]


def summarise(start: Snapshot | None, end: Snapshot | None) -> dict[str, Any] | None:
    """What others used between two snapshots, and whether that counts as contention."""
    if start is None or end is None or end.wall <= start.wall:
        return None
    wall = end.wall - start.wall
    busy = end.busy_s - start.busy_s
    own = (
        end.tree_cpu_s - start.tree_cpu_s
        if end.tree_cpu_s is not None and start.tree_cpu_s is not None
        else None
    )
    total = max(end.total_s - start.total_s, 1e-9)
    steal = (end.steal_s - start.steal_s) / total
    other = None if own is None else max(busy - own, 0.0) / wall
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {
        "seconds": wall,
        "other_cpu_cores": other,
        "own_cpu_cores": None if own is None else own / wall,
        "steal_fraction": steal,
        "loadavg_1m": load,
        "cpu_count": os.cpu_count(),
        "contended": bool(causes(other, steal)),
        **(end.held.since(start.held, wall) if end.held and start.held else {}),
    }


def machine_busy(seconds: float = 1.0) -> dict[str, Any] | None:
    """Cores used by every process but this one over `seconds`, and the load average."""
    root = os.getpid()
    start = snapshot(root)
    time.sleep(seconds)
    return summarise(start, snapshot(root))


def busy_warning(sample: dict[str, Any] | None) -> str | None:
    """A one-line warning when other processes keep the machine busy; None when quiet."""
    if not sample:
        return None
    other = sample.get("other_cpu_cores") or 0.0
    if other <= BUSY_WARN_CORES and sample["steal_fraction"] <= STEAL_LIMIT:
        return None
    return (
        f"warning: the machine is busy: other processes use {other:.2f} of "
        f"{sample['cpu_count']} cores (load average {sample['loadavg_1m']:.2f}, steal "
        f"{sample['steal_fraction']:.1%}); runs measured now will be flagged as contended "
        "and their throughput understated. Stop other work first for numbers to compare"
    )
