"""The machine and software next to every number: what a fair comparison must state.

Also the one place where worker threads are set, so that every engine's runner
sets them identically.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import json
import math
import os
import platform
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import psutil

from bench.core.allowlist import allowed_env

try:  # py-cpuinfo, which pytest-benchmark also installs: the fullest CPU description
    import cpuinfo
except ImportError:  # the record falls back to /proc/cpuinfo's model string
    cpuinfo = None

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def frameworks_loaded(frameworks: Iterable[str]) -> list[str]:
    """Which of `frameworks` (the engines' top-level modules, which read the thread
    variables once, when they load) this process has imported so far."""
    return [name for name in frameworks if name in sys.modules]


def openmp_threads() -> dict[str, int]:
    """What each OpenMP runtime loaded in this process reports as its thread count.

    torch uses libgomp and paddle ships libiomp5; each reads OMP_NUM_THREADS when it
    loads, so a variable set too late shows here as the machine's core count. Read
    from the runtimes themselves (omp_get_max_threads) via /proc/self/maps; {} where
    none is loaded or /proc is missing.
    """
    try:
        with open("/proc/self/maps") as fh:
            paths = sorted(
                {
                    line.split()[-1]
                    for line in fh
                    if line.rsplit("/", 1)[-1].startswith(("libgomp", "libiomp", "libomp"))
                }
            )
    except OSError:
        return {}
    found: dict[str, int] = {}
    for path in paths:
        if not path.startswith("/"):
            continue
        try:
            found[Path(path).name] = int(ctypes.CDLL(path).omp_get_max_threads())
        except (OSError, AttributeError):
            continue
    return found


def set_thread_env(threads: int) -> None:
    """Set OMP/MKL threads before any framework is imported.

    torchrun sets OMP_NUM_THREADS=1 when unset while horovodrun and paddle's
    launcher do not, so each runner overrides both explicitly, the same way.
    """
    for var in THREAD_VARS:
        os.environ[var] = str(threads)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def library_versions() -> dict[str, str | None]:
    names = {
        "numpy": "numpy",
        "torch": "torch",
        "paddle": "paddlepaddle",
        "paddle_gpu": "paddlepaddle-gpu",
        "horovod": "horovod",
        "pandas": "pandas",
    }
    found = {key: _version(dist) for key, dist in names.items()}
    return {k: v for k, v in found.items() if v is not None}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_info(root: Path | None = None) -> dict[str, Any]:
    """Commit of the suite's own tree and whether it had uncommitted changes."""
    root = root or Path(__file__).resolve().parents[2]

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(
                ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {
        "commit": commit,
        "dirty": bool(status) if status is not None else None,
        "branch": git("rev-parse", "--abbrev-ref", "HEAD"),
        "commit_time": git("show", "-s", "--format=%cI", "HEAD"),
    }


_MACHINE: dict[str, Any] = {}


def machine_info() -> dict[str, Any]:
    """The machine in full: CPU (from py-cpuinfo when installed), cores, memory, kernel.

    Without py-cpuinfo the CPU is the /proc/cpuinfo model string and the logical core
    count; `cpu_source` says which. Read once per process (py-cpuinfo takes ~0.5 s);
    the ever-changing current clock (hz_actual) is left out.
    """
    if not _MACHINE:
        info: dict[str, Any] = {
            "arch": platform.machine(),
            "system": platform.system(),
            "release": platform.release(),
            "logical_cpus": os.cpu_count(),
        }
        try:
            info["physical_cpus"] = psutil.cpu_count(logical=False)
            info["memory_bytes"] = psutil.virtual_memory().total
        except Exception:  # /proc unreadable (a sandbox): those fields stay unknown
            pass
        try:
            if cpuinfo is None:
                raise ImportError("py-cpuinfo")
            raw = cpuinfo.get_cpu_info()
            info["cpu"] = {
                k: v
                for k, v in raw.items()
                if not k.startswith("hz_actual") and k not in ("python_version", "cpuinfo_version")
            }
            info["cpu_source"] = "py-cpuinfo"
        except Exception:  # not installed, or it failed on this CPU: fall back
            info["cpu"] = {"brand_raw": cpu_model(), "count": os.cpu_count()}
            info["cpu_source"] = "/proc/cpuinfo"
        _MACHINE.update(info)
    return json.loads(json.dumps(_MACHINE))  # a copy callers may change


def gpus() -> list[dict[str, str]]:
    """GPU model and driver per device, from nvidia-smi when it exists; [] on CPU machines."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=15,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    rows = []
    for line in out.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3:
            rows.append({"name": parts[0], "driver": parts[1], "memory": parts[2]})
    return rows


def environment() -> dict[str, Any]:
    """Machine, software and behaviour-changing variables of this process."""
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "machine": machine_info(),
        "gpus": gpus(),
        "libraries": library_versions(),
        "git": git_info(),
        "env_vars": allowed_env(os.environ),
        "executable": sys.executable,
    }


def machine_key(env: Mapping[str, Any]) -> str:
    """Short label of the hardware a record ran on, for warnings across machines."""
    gpu = "; ".join(sorted({g.get("name", "?") for g in env.get("gpus") or []}))
    return f"{env.get('cpu', '?')} x{env.get('cpu_count', '?')}" + (f" + {gpu}" if gpu else "")


CGROUP_FS = Path("/sys/fs/cgroup")


def _cpu_limit(folder: Path, v2: bool) -> float | None:
    """CPUs the CFS quota in one cgroup folder allows; None: no quota there, or unreadable."""
    try:
        if v2:
            quota, period = (folder / "cpu.max").read_text().split()[:2]
        else:
            quota = (folder / "cpu.cfs_quota_us").read_text().strip()
            period = (folder / "cpu.cfs_period_us").read_text().strip()
        if quota in ("max", "-1") or int(period) <= 0:
            return None
        return int(quota) / int(period)
    except (OSError, ValueError):
        return None


def cgroup_cpu_limit(
    proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = CGROUP_FS
) -> float | None:
    """The CPUs a cgroup CPU quota allows this process, None when no quota applies.

    The process's own cgroup (from `proc_cgroup`) and every cgroup above it, in cgroup v2
    (`cpu.max`) and v1 (`cpu.cfs_quota_us`): a parent's quota caps its children, so the
    tightest counts. In a container without a cgroup namespace the path names folders
    the mount does not have; those are skipped and the mount's root still counts.
    """
    limits = [_cpu_limit(f, v2) for f, v2, _ in _cpu_cgroups(proc_cgroup, root)]
    found = [limit for limit in limits if limit is not None]
    return min(found) if found else None


def _cpu_cgroups(proc_cgroup: Path, root: Path) -> list[tuple[Path, bool, bool]]:
    """Every cgroup folder on this process's path that can hold a CPU quota: (folder,
    cgroup v2, whether it is the process's own, the deepest)."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        hierarchy, controllers, path = [*line.split(":", 2), "", ""][:3]
        if hierarchy == "0" and not controllers:
            mounts, v2 = [root, root / "unified"], True  # unified alone, or hybrid
        elif "cpu" in controllers.split(","):
            mounts, v2 = [root / "cpu", root / controllers], False
        else:
            continue
        parts = Path(path).parts[1:]
        for mount in dict.fromkeys(mounts):
            folders = [mount.joinpath(*parts[:i]) for i in range(len(parts) + 1)]
            out += [(f, v2, i == len(parts)) for i, f in enumerate(folders) if f.is_dir()]
    return out


def cgroup_throttled_s(
    proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = CGROUP_FS
) -> float | None:
    """Seconds this process's own cgroup has been throttled by its CPU quota so far (v1
    `throttled_time` ns, v2 `throttled_usec`); None where no cgroup says."""
    for folder, v2, own in _cpu_cgroups(proc_cgroup, root):
        if not own:
            continue
        try:
            stat = dict(line.split() for line in (folder / "cpu.stat").read_text().splitlines())
            return int(stat["throttled_usec"]) / 1e6 if v2 else int(stat["throttled_time"]) / 1e9
        except (OSError, KeyError, ValueError):
            continue
    return None


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity mask, capped by a cgroup CPU quota.

    os.cpu_count() counts the machine's CPUs, which overstates what a container, a
    `taskset` launch or a cgroup with a CPU quota (a Slurm job, a systemd slice) may use.
    A quota of 1.5 CPUs counts as 2: the second CPU is there, for part of the time.
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    limit = cgroup_cpu_limit()
    if limit is not None:
        cpus = min(cpus, math.ceil(limit))
    return max(cpus, 1)


def oversubscription(workers_on_host: int, threads_per_worker: int) -> dict[str, Any]:
    """Whether this host runs more worker threads than it has usable CPUs, with the numbers.

    Timings of an oversubscribed run measure the CPU contention as much as the engine,
    so records carry this and every comparison table flags it.
    """
    cpus = usable_cpus()
    return {
        "oversubscribed": workers_on_host * threads_per_worker > cpus,
        "cpu_budget": {
            "workers_on_host": workers_on_host,
            "threads_per_worker": threads_per_worker,
            "usable_cpus": cpus,
        },
    }
