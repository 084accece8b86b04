"""`bench export --pytest-benchmark FILE`: records in pytest-benchmark's JSON format.

One benchmark per cell (comparison, engine, workers); its "rounds" are the
training steps of every ok run of that cell, pooled (`extra_info.pooled_runs` says
how many runs; `bench compare` keeps them apart), each step's time being the slowest
rank's (a data-parallel step is done when every rank is). Cells are grouped by
model and worker count, so `pytest-benchmark compare` ranks a 2-worker step only
against other 2-worker steps. OPS is samples/s (the global batch over the mean
step), not steps/s; `extra_info.ops_unit` says so. `pytest-benchmark compare
FILE ...` then reads sweeps like its own runs.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.core.machine import machine_key
from bench.records import LoadedRecord
from bench.tables.frame import comparison_key, finished

FORMAT_VERSION = "5.1.0"  # the pytest-benchmark JSON layout written here


def _stats(data: np.ndarray) -> dict[str, Any]:
    q1, median, q3 = np.percentile(data, [25, 50, 75])
    iqr = q3 - q1
    mean, std = float(data.mean()), float(data.std(ddof=1)) if data.size > 1 else 0.0
    low, high = q1 - 1.5 * iqr, q3 + 1.5 * iqr
    inside = data[(data >= low) & (data <= high)]
    return {
        "min": float(data.min()),
        "max": float(data.max()),
        "mean": mean,
        "stddev": std,
        "rounds": int(data.size),
        "median": float(median),
        "iqr": float(iqr),
        "q1": float(q1),
        "q3": float(q3),
        "iqr_outliers": int(data.size - inside.size),
        "stddev_outliers": int(np.sum(np.abs(data - mean) > std)),
        "outliers": f"{int(np.sum(np.abs(data - mean) > std))};{int(data.size - inside.size)}",
        "ld15iqr": float(inside.min()) if inside.size else float(data.min()),
        "hd15iqr": float(inside.max()) if inside.size else float(data.max()),
        "ops": 1.0 / mean if mean > 0 else 0.0,
        "total": float(data.sum()),
        "iterations": 1,
    }


def to_pytest_benchmark(recs: Sequence[LoadedRecord]) -> dict[str, Any]:
    """pytest-benchmark's JSON: one benchmark per (comparison, engine, workers) cell,
    its rounds the slowest rank's step times of every run, with machine and commit."""
    cells: dict[tuple[str, str, int], list[LoadedRecord]] = {}
    for r in finished(recs):
        if not (r.get("spec") or {}).get("grad_sync", True):
            continue
        # one benchmark never pools machines or library versions (as in `bench compare`)
        key = comparison_key(r)
        cells.setdefault((key, r["engine"], int(r["world_size"])), []).append(r)
    env = (recs[0].get("env") or {}) if recs else {}
    return {
        "machine_info": _machine_info(env),
        "commit_info": _commit_info(env),
        "benchmarks": [_benchmark(*key, runs) for key, runs in sorted(cells.items())],
        "datetime": datetime.datetime.now(datetime.UTC).isoformat(),
        "version": FORMAT_VERSION,
    }


def _benchmark(group: str, engine: str, workers: int, runs: list[LoadedRecord]) -> dict[str, Any]:
    steps = np.concatenate([np.asarray(r["step_times_s"], dtype=float).max(axis=0) for r in runs])
    spec = runs[0]["spec"]
    model, dataset = spec.get("model", "?"), spec.get("dataset", "?")
    name = f"train_step[{model}-{dataset}-{engine}-np{workers}]"
    batch = _global_batch(runs[0], workers)
    stats = _stats(steps)
    if batch and stats["mean"] > 0:
        stats["ops"] = float(batch) / stats["mean"]  # samples/s, as bench compare counts
    return {
        "group": f"{model}/{dataset} {workers} worker{'s' if workers > 1 else ''} ({group})",
        "name": name,
        "fullname": f"bench::{group}::{name}",
        "params": {"engine": engine, "workers": workers},
        "param": f"{engine}-np{workers}",
        "extra_info": {
            "engine": engine,
            "workers": workers,
            "model": model,
            "dataset": dataset,
            "global_batch": batch,
            "ops_unit": "samples/s" if batch else "steps/s",
            "pooled_runs": len(runs),
            "rounds_are": f"timed steps of {len(runs)} run(s), pooled; slowest rank's time",
            "samples_per_s_median": float(np.median([r["throughput"] for r in runs])),
            "versions": (runs[0].get("env") or {}).get("libraries", {}),
            "machine": machine_key(runs[0].get("env") or {}),
            "records": [r.get("_source") for r in runs],
        },
        "options": {
            "disable_gc": False,
            "timer": "perf_counter",
            "min_rounds": 1,
            "max_time": 0.0,
            "min_time": 0.0,
            "warmup": False,
        },
        "stats": stats,
    }


def _global_batch(record: LoadedRecord, workers: int) -> int | None:
    """Samples per step over all workers: the record's, else from its spec's scaling."""
    if record.get("global_batch"):
        return int(record["global_batch"])
    spec = record.get("spec") or {}
    batch = spec.get("batch_size")
    if not isinstance(batch, int):
        return None
    return batch * workers if spec.get("scaling", "weak") == "weak" else batch


def _machine_info(env: Mapping[str, Any]) -> dict[str, Any]:
    machine = env.get("machine") or {}
    return {
        "node": env.get("hostname"),
        "processor": env.get("cpu"),
        # py-cpuinfo's own dict where the record has it, as pytest-benchmark stores
        "cpu": machine.get("cpu") or {"brand_raw": env.get("cpu"), "count": env.get("cpu_count")},
        "python_version": env.get("python"),
        "machine": machine_key(env),
        "system": machine.get("system"),
        "release": machine.get("release"),
    }


def _commit_info(env: Mapping[str, Any]) -> dict[str, Any]:
    git = env.get("git") or {}
    return {
        "id": git.get("commit"),
        "dirty": git.get("dirty"),
        "branch": git.get("branch"),
        "time": git.get("commit_time"),
    }


def write(data: Mapping[str, Any], path: str | Path) -> int:
    """Write `data` (`to_pytest_benchmark`'s) to `path`; how many benchmarks it holds."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)  # as `bench compare --out` does
    Path(path).write_text(json.dumps(data, indent=1))
    return len(data["benchmarks"])
