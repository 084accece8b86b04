"""The machine and software next to every number: what a fair comparison must state.

Also the one place where worker threads are set, so that every engine's runner
sets them identically.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

# Variables that change how an engine behaves; recorded whenever set.
BEHAVIOUR_PREFIXES = ("OMP_", "MKL_", "OPENBLAS_", "NCCL_", "HOROVOD_", "FLAGS_", "GLOO_", "TORCH_")

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")

# Frameworks that read the thread variables once, when they load.
FRAMEWORKS = ("torch", "paddle", "horovod")


def frameworks_loaded() -> list[str]:
    """Which of the frameworks this process has imported so far."""
    return [name for name in FRAMEWORKS if name in sys.modules]


def openmp_threads() -> dict[str, int]:
    """What each OpenMP runtime loaded in this process reports as its thread count.

    torch uses libgomp and paddle ships libiomp5; each reads OMP_NUM_THREADS when it
    loads, so a variable set too late shows here as the machine's core count. Read
    from the runtimes themselves (omp_get_max_threads) via /proc/self/maps; {} where
    none is loaded or /proc is missing.
    """
    import ctypes

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
    root = root or Path(__file__).resolve().parent.parent

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
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def gpus() -> list[dict[str, str]]:
    """GPU model and driver per device, from nvidia-smi when it exists; [] on CPU machines."""
    import shutil

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
        "gpus": gpus(),
        "libraries": library_versions(),
        "git": git_info(),
        "env_vars": {
            k: v for k, v in sorted(os.environ.items()) if k.startswith(BEHAVIOUR_PREFIXES)
        },
        "executable": sys.executable,
    }


def machine_key(env: dict[str, Any]) -> str:
    """Short label of the hardware a record ran on, for warnings across machines."""
    gpu = "; ".join(sorted({g.get("name", "?") for g in env.get("gpus") or []}))
    return f"{env.get('cpu', '?')} x{env.get('cpu_count', '?')}" + (f" + {gpu}" if gpu else "")
