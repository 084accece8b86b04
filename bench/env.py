"""The machine and software next to every number: what a fair comparison must state.

Also the one place where worker threads are set, so that every engine's runner
sets them identically.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import platform
import re
import shlex
import socket
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.record import RunFields

# The allow-list: variables that change how an engine behaves (threads, Horovod,
# NCCL/Gloo, CUDA, Paddle flags, the launchers' rendezvous). Only these are ever
# recorded or kept in a log copied into results; any other variable of the shell
# (tokens, passwords, paths) is dropped wherever a launcher echoes the environment.
BEHAVIOUR_PREFIXES = (
    "OMP_",
    "MKL_",
    "OPENBLAS_",
    "KMP_",
    "NCCL_",
    "GLOO_",
    "HOROVOD_",
    "CUDA_",
    "NVIDIA_",
    "FLAGS_",
    "PADDLE_",
    "TORCH_",
    "TORCHELASTIC_",
)
BEHAVIOUR_NAMES = frozenset(
    {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}
)
# Never kept, even under an allowed prefix: names that say they hold a secret.
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|API_?KEY|PRIVATE|AUTH|COOKIE", re.I)
REDACTED = "<redacted>"

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
            import psutil

            info["physical_cpus"] = psutil.cpu_count(logical=False)
            info["memory_bytes"] = psutil.virtual_memory().total
        except Exception:  # psutil missing or /proc unreadable: those fields stay unknown
            pass
        try:
            import cpuinfo  # py-cpuinfo, which pytest-benchmark also uses

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


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity mask, capped by a cgroup v2 CPU quota.

    os.cpu_count() counts the machine's CPUs, which overstates what a container or a
    `taskset` launch may use.
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max" and int(period) > 0:
            cpus = min(cpus, max(1, -(-int(quota) // int(period))))
    except (OSError, ValueError):
        pass
    return max(cpus, 1)


def oversubscription(workers_on_host: int, threads_per_worker: int) -> RunFields:
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


def allowed_var(name: str) -> bool:
    """Whether environment variable `name` is on the allow-list (see BEHAVIOUR_PREFIXES)."""
    return (name.startswith(BEHAVIOUR_PREFIXES) or name in BEHAVIOUR_NAMES) and not (
        SECRET_NAME.search(name)
    )


def allowed_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The allow-listed part of an environment, sorted by name."""
    return {k: v for k, v in sorted(environ.items()) if allowed_var(k)}


_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.S)
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")  # how environment variables are spelled
# Shell words after which a new command, with its own leading assignments, starts.
_COMMAND_START = frozenset({"env", "exec", "&&", "||", ";", "|", "sudo", "nohup"})


def _scrub_words(words: Sequence[str]) -> list[str]:
    out: list[str] = []
    leading = True  # assignments before a command's name are its environment
    for word in words:
        m = _ASSIGNMENT.fullmatch(word)
        if m and leading:
            if allowed_var(m[1]):
                out.append(word)
            continue  # an environment entry off the allow-list: dropped
        if m and _ENV_NAME.fullmatch(m[1]) and not allowed_var(m[1]):
            out.append(f"{m[1]}={REDACTED}")  # looks like one elsewhere: masked in place
            continue
        if leading and word.startswith("-"):  # env's own options (-i, -u NAME)
            out.append(word)
            continue
        leading = os.path.basename(word) in _COMMAND_START
        if "=" in word and any(c.isspace() for c in word):
            word = scrub_shell(word)  # a command line passed as one word (sh -c, ssh)
        out.append(word)
    return out


def scrub_shell(command: str) -> str:
    """A shell command line with environment assignments off the allow-list removed."""
    try:
        words = shlex.split(command)
    except ValueError:  # unbalanced quotes: mask every assignment-shaped word instead
        return re.sub(
            r"(?<![A-Za-z0-9_])([A-Z_][A-Z0-9_]*)=\S*",
            lambda m: m[0] if allowed_var(m[1]) else f"{m[1]}={REDACTED}",
            command,
        )
    scrubbed = _scrub_words(words)
    if scrubbed == words:
        return command
    ops = {"&&", "||", ";", "|"}
    return " ".join(w if w in ops else shlex.quote(w) for w in scrubbed)


def scrub_argv(argv: Sequence[str]) -> list[str]:
    """An argv list without environment entries off the allow-list.

    `env K=V ... cmd` (how horovodrun starts its workers) and leading `K=V` words
    keep only allowed variables; any other KEY=VALUE spelled like an environment
    variable has its value masked; a word holding a whole shell command line is
    scrubbed the same way.
    """
    return _scrub_words([str(a) for a in argv])


def scrub_launcher(launcher: Mapping[str, Any]) -> dict[str, Any]:
    """A record's launcher block with every argv (or list of argvs) scrubbed."""

    def scrub(value: Any) -> Any:
        if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
            return [scrub(v) for v in value]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return scrub_argv(value)
        if isinstance(value, str):
            return scrub_shell(value)
        return value

    return {k: scrub(v) for k, v in launcher.items()}


def _secret_values(environ: Mapping[str, str]) -> list[str]:
    # values long enough not to match by chance, of variables named like secrets
    return sorted(
        {v for k, v in environ.items() if SECRET_NAME.search(k) and len(v) >= 6},
        key=len,
        reverse=True,
    )


def _scrub_text(text: str, secrets: Sequence[str]) -> str:
    lines = []
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        # paddle.distributed.launch logs its whole os.environ as "environ({...})"
        if stripped.startswith("environ({") and stripped.endswith("})"):
            try:
                env = ast.literal_eval(stripped[len("environ(") : -1])
                line = f"environ({allowed_env(env)!r})" + ("\n" if line.endswith("\n") else "")
            except (ValueError, SyntaxError):
                line = f"environ({{}})  # {REDACTED}\n"
        lines.append(line)
    text = "".join(lines)
    for value in secrets:
        text = text.replace(value, REDACTED)
    return text


def scrub_log_dir(folder: str | Path, environ: Mapping[str, str] | None = None) -> list[Path]:
    """Remove environment variables off the allow-list from a cell's logs; returns files changed.

    Launchers write the environment into their logs (paddle's envlog.N, backup_env.N.json
    and its "environ({...})" line), and a worker may print it on a crash: those keep
    only allowed variables, and the values of variables named like secrets in
    `environ` (default: this process's) are masked in every text file.
    """
    secrets = _secret_values(os.environ if environ is None else environ)
    changed: list[Path] = []
    root = Path(folder)
    if not root.is_dir():
        return changed
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.is_symlink():
            continue
        try:
            raw = path.read_bytes()
        except OSError:
            continue
        if b"\0" in raw[:4096]:
            continue  # binary (a timeline is text; nothing binary holds the environment)
        text = raw.decode("utf-8", errors="replace")
        new = text
        if path.name.startswith("envlog."):
            new = "".join(
                line
                for line in text.splitlines(keepends=True)
                if allowed_var(line.partition("=")[0])
            )
        elif path.name.startswith("backup_env.") and path.suffix == ".json":
            try:
                new = json.dumps(allowed_env(json.loads(text)), indent=4)
            except (ValueError, AttributeError):
                new = "{}"
        new = _scrub_text(new, secrets)
        if new != text:
            try:
                path.write_text(new)
            except OSError as exc:  # the cell's record matters more; say what was left
                print(f"warning: cannot scrub {path}: {exc.strerror}", file=sys.stderr)
                continue
            changed.append(path)
    return changed
