"""The peak this machine reaches: a dense matrix multiply at a run's threads and precision.

Utilisation (achieved FLOP/s over peak) needs a peak the machine actually reaches, not
a datasheet figure: the best of several timed rounds of torch.matmul on square
matrices, sized until one multiply takes at least MIN_MULTIPLY_S, with the run's
thread count and precision (on a GPU with tensor cores as the precision allows).
It is measured once per machine, threads, precision and torch version, by `bench
run` before its cells (or `bench peak`), and cached beside the results in
FILE, and in the user's cache (`$XDG_CACHE_HOME/bench/FILE`, by default
`~/.cache/bench/peak-flops.json`), so that a new results folder on the same machine
reuses it instead of measuring again (`bench peak --remeasure` replaces both). Each
entry says where it came from (`origin`: measured into that folder, or copied from the
user's cache, `copied_from`) and when it was measured (`measured`); each run's record
carries the entry it was divided by (`peak`), with the file it was read from (`source`).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.core import machine
from bench.core.cachedir import user_cache

FILE = "peak-flops.json"
# an entry's `origin`: measured for the folder whose cache holds it, or copied there
# from the user's cache (its path in `copied_from`), measured earlier (`measured`)
MEASURED, USER_CACHE = "measured", "user cache"
MIN_MULTIPLY_S = 0.01
ROUNDS = 5
MAX_N = 8192


def key(cpu: str, cpus: int, threads: int, precision: str, device: str, torch_version: str) -> str:
    """What a peak depends on: hardware, threads, precision, device and the library."""
    return f"{cpu} x{cpus} | {device} | {precision} | {threads} threads | torch {torch_version}"


def this_key(threads: int, precision: str, device: str, gpu: str | None = None) -> str:
    """This machine's key; reads versions from package metadata, so no framework is imported
    (a Paddle run names its peak without loading torch)."""
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = "absent"
    hw = gpu if device == "cuda" and gpu else machine.cpu_model()
    return key(hw, machine.usable_cpus(), threads, precision, device, torch_version)


def measure(threads: int, precision: str = "fp32", device: str = "cpu") -> dict[str, Any]:
    """Best GFLOP/s of a dense matmul over ROUNDS rounds (2 n^3 FLOPs a multiply)."""
    import torch

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    torch.set_num_threads(threads)
    n, per = 256, 0.0
    while True:
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        _time_multiplies(a, b, 1)  # warm-up: thread pool, allocator, kernel choice
        per = _time_multiplies(a, b, 1)
        if per >= MIN_MULTIPLY_S or n >= MAX_N:
            break
        n *= 2
    reps = max(1, int(0.1 / per))
    best = min(_time_multiplies(a, b, reps) for _ in range(ROUNDS))
    return {
        "gflops": 2 * n**3 / best / 1e9,
        "n": n,
        "threads": threads,
        "precision": precision,
        "device": device,
        "rounds": ROUNDS,
        "multiplies_per_round": reps,
        "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def measure_alone(
    threads: int, precision: str = "fp32", device: str = "cpu", timeout: float = 300
) -> dict[str, Any]:
    """`measure` in a process of its own: the caller never loads torch or keeps its threads."""
    env = {**os.environ, **dict.fromkeys(machine.THREAD_VARS, str(threads))}
    code = (
        "import json, sys; from bench.measure import peak; "
        "print(json.dumps(peak.measure(int(sys.argv[1]), sys.argv[2], sys.argv[3])))"
    )
    try:
        out = subprocess.run(
            [sys.executable, "-c", code, str(threads), precision, device],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"the matmul peak took over {timeout:.0f}s") from exc
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed")
    try:
        result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError) as exc:
        raise RuntimeError(f"the measurement printed no result: {out.stdout[-200:]!r}") from exc
    return result


def _time_multiplies(a: Any, b: Any, reps: int) -> float:
    """Seconds per multiply over `reps` back to back (GPU work waited for)."""
    import torch

    sync = torch.cuda.synchronize if a.is_cuda else (lambda: None)
    sync()
    start = time.perf_counter()
    for _ in range(reps):
        torch.matmul(a, b)
    sync()
    return (time.perf_counter() - start) / reps


def load(folder: Path) -> dict[str, Any]:
    """The cache beside the results: key -> entry; empty when absent or unreadable."""
    try:
        data = json.loads((folder / FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def lookup(folder: Path, entry_key: str) -> dict[str, Any] | None:
    """The cached entry for `entry_key`, with the file it came from; None if not measured."""
    entry = load(folder).get(entry_key)
    if not isinstance(entry, Mapping) or not isinstance(entry.get("gflops"), int | float):
        return None
    return {**entry, "key": entry_key, "source": str(folder / FILE)}


def _shared(entry_key: str) -> dict[str, Any] | None:
    """The user cache's entry for `entry_key`, marked as copied from it: a record divided
    by it then says that its peak was measured earlier, and in which file it was found."""
    entry = lookup(user_cache(), entry_key)
    if entry is None:
        return None
    return {**entry, "origin": USER_CACHE, "copied_from": entry["source"]}


def provenance(entry: Mapping[str, Any]) -> str:
    """Where an entry came from and when it was measured, for a person to read."""
    when = f"measured {entry.get('measured', 'at an unrecorded time')}"
    if entry.get("origin") == USER_CACHE:
        return f"{when}, reused from the user cache {entry.get('copied_from')}"
    return when


def _store(folder: Path, entry_key: str, entry: Mapping[str, Any]) -> None:
    """Add one entry: read, change and replace under a lock, so that two sweeps sharing a
    folder keep both their entries; the replace is atomic, so a reader never sees half."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f".{FILE}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cache = load(folder)
        cache[entry_key] = {k: v for k, v in entry.items() if k not in ("key", "source")}
        tmp = folder / f".{FILE}.{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(json.dumps(cache, indent=1, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(folder / FILE)


def ensure(
    folder: Path,
    threads: int,
    precision: str = "fp32",
    device: str = "cpu",
    remeasure: bool = False,
    may_measure: bool = True,
) -> dict[str, Any] | None:
    """The cached entry for this machine and settings, measuring it first if missing
    (from the user's cache when it has it, unless `remeasure`); None when it is missing
    and `may_measure` is False (a busy machine would understate the peak)."""
    # the name nvidia-smi gives, as runs record it in env.gpus
    gpu = (machine.gpus() or [{}])[0].get("name") if device == "cuda" else None
    entry_key = this_key(threads, precision, device, gpu)
    entry = None if remeasure else lookup(folder, entry_key) or _shared(entry_key)
    if entry is None:
        if not may_measure:
            return None
        entry = {**measure_alone(threads, precision, device), "origin": MEASURED}
    for where in (folder, user_cache()):
        try:
            if remeasure or lookup(where, entry_key) is None:
                _store(where, entry_key, entry)
        except OSError:  # a read-only home still lets the results folder keep it
            if where == folder:
                raise
    return {**entry, "key": entry_key, "source": str(folder / FILE)}
