"""From records on disk to one table of runs: the frame every comparison is drawn from.

Records are grouped by their spec minus the seed, their machine (CPU model and
count, GPUs), their library versions and the measurement protocol that timed
them: one comparison covers only runs that were asked to do the same thing on
the same hardware and software, timed the same way, so no median pools two
machines or two protocols. Every number is computed from records that `bench
compare --sources` lists, so each can be traced to a line of a results file.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bench import engines, records
from bench.contract.identity import GROUP_FIELDS_V1, canonical
from bench.core import machine
from bench.core.units import format_rate
from bench.measure import contention
from bench.records import Kind, LoadedRecord, RunRecord, Status
from bench.records.types import Epoch, Spec
from bench.tables import derived

# Spec fields that may differ between the runs of one comparison.
VARYING = ("seed",)
DEFAULT_TARGET = 0.95


def group_key(spec: Mapping[str, Any], *context: str, protocol: int = 1) -> str:
    """Short hash of a spec minus its seed, plus `context` (machine, libraries) when given.

    The spec is normalised first (`spec.canonical`), so a field added to RunSpec at its
    default does not split a group; records of another measurement protocol than the
    first get a group of their own (version 1 hashes as before the version existed).
    """
    # The seed is left out first, so that a sweep's records share one cached key
    # (compare computes three keys per record; 10,000 records would hash 30,000 specs).
    same = tuple((k, type(v).__name__, v) for k, v in sorted(spec.items()) if k not in VARYING)
    try:
        return _group_key(same, context, protocol)
    except TypeError:  # an unhashable value (lists in a damaged record): hashed uncached
        return _group_key.__wrapped__(same, context, protocol)


@functools.lru_cache(maxsize=4096)
def _group_key(
    same: tuple[tuple[str, str, Any], ...], context: tuple[str, ...], protocol: int
) -> str:
    spec = {k: v for k, _, v in same}
    fixed = {k: v for k, v in canonical(spec, GROUP_FIELDS_V1).items() if k not in VARYING}
    if protocol not in (0, 1):  # 0: any protocol; version 1 hashes as before versions
        context = (*context, f"protocol {protocol}")
    text = json.dumps([fixed, *context] if context else fixed, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def libraries_text(libraries: Mapping[str, Any]) -> str:
    """'numpy 2.1.0, torch 2.5.1': the versions a comparison's records share."""
    return ", ".join(f"{k} {v}" for k, v in sorted(libraries.items())) or "versions not recorded"


def _context(r: RunRecord) -> tuple[str, str]:
    """(machine, library versions as JSON): what one comparison never pools."""
    env = r.get("env") or {}
    return machine.machine_key(env), json.dumps(env.get("libraries", {}), sort_keys=True)


def comparison_key(r: RunRecord) -> str:
    """The comparison a record belongs to: its spec minus the seed, on its machine with
    its library versions, under its measurement protocol (`group_key`)."""
    return group_key(r.get("spec") or {}, *_context(r), protocol=records.protocol_version(r))


def finished(recs: Iterable[LoadedRecord], kind: Kind = Kind.TRAIN) -> list[LoadedRecord]:
    """The runs of `kind` (a record without one is a training run) that finished with
    status ok: the runs whose numbers a table or an export measures."""
    return [r for r in recs if r.get("kind", Kind.TRAIN) == kind and r.get("status") == Status.OK]


def usable(df: pd.DataFrame, twins: bool = False) -> pd.DataFrame:
    """The launches a table, a plot or a decision measures: the rows of `frame` that
    finished ok and averaged gradients (with `twins`, the compute-only twins instead),
    with a finite, positive throughput (a damaged record's may be anything). The one
    filter they all read launches through."""
    if df.empty:
        return df
    tput = pd.to_numeric(df["throughput"], errors="coerce")
    keep = (df["status"] == Status.OK) & (df["grad_sync"].astype(bool) != twins)
    return df[keep & np.isfinite(tput) & (tput > 0)]


def _title(spec: Spec) -> str:
    batch = "per worker" if spec.get("scaling") == "weak" else "global"
    steps = f"{spec.get('epochs')} epochs" + (
        f" (max {spec['max_steps']} steps)" if spec.get("max_steps") else ""
    )
    return (
        f"{spec.get('model')} on {spec.get('dataset')} | {spec.get('scaling')} scaling, "
        f"batch {spec.get('batch_size')} {batch} | {spec.get('optimizer')} lr {spec.get('lr')} "
        f"({spec.get('lr_rule')}, {spec.get('lr_schedule')}) | {steps} | "
        f"threads {spec.get('threads')} | {spec.get('device')} {spec.get('precision')}"
    )


def time_to_target(epochs: list[Epoch], target: float) -> float | None:
    """Training seconds (slowest rank, evaluation excluded) until test accuracy >= target."""
    elapsed = 0.0
    for e in epochs:
        elapsed += float(e.get("train_time_s") or 0.0)
        if (e.get("test_accuracy") or 0.0) >= target:
            return elapsed
    return None


def variant(r: RunRecord) -> str:
    """The engine as compare names it: its entry's `variant_options` bare where not at
    their default (`horovod[mpi]` for Horovod's MPI controller, the one that ran, from
    knobs), then every other option that changes training, `[key=value]`."""
    engine = str(r.get("engine"))
    options = dict(r.get("engine_options") or {})
    knobs = r.get("knobs") or {}
    bare = ""
    for option, default in engines.variant_options(engine).items():
        value = knobs.get(option) or options.get(option)
        options.pop(option, None)
        bare += f"[{value}]" if value not in (None, default) else ""
    return engine + bare + "".join(f"[{k}={v}]" for k, v in sorted(options.items()))


def _why_columns(r: RunRecord) -> dict[str, Any]:
    """Utilisation, start-up, contention, cost and energy inputs of one run."""
    return {
        "peak_gflops": derived.peak_capacity(r),  # all workers at the measured peak
        "startup": _startup(r),  # launch to first timed step (bench/tables/startup.py)
        "nodes": int(r.get("nodes") or 1),
        "energy": r.get("energy") if isinstance(r.get("energy"), dict) else {},
        # the profiled steps' phases (bench/tables/breakdown.py), {} if absent or malformed
        "breakdown": _breakdown(r),
        "global_batch": r.get("global_batch"),
        "per_worker_batch": r.get("per_worker_batch"),
        # who used the CPUs while it was timed, per rank (bench/tables/derived.py)
        "cpu": derived.rank_cpu(r),
        # others or the hypervisor took CPU while it was timed (bench/measure/contention.py)
        "contended": bool(r.get("contended")),
        "contention_cause": contention_cause(r),
        # how its workers shared one machine's CPUs (the verdict's advice is checked on it)
        "layout": derived.layouts(r)[0],
        "step_s": derived.step_s(r),
        # cuda: a straggler's slowness need not be the CPU's (bench/tables/breakdown.py)
        "device": (r.get("spec") or {}).get("device"),
    }


def _breakdown(r: RunRecord) -> dict[str, Any]:
    b: Any = r.get("breakdown")
    phases = b.get("phases_ms") if isinstance(b, dict) else None
    ok = isinstance(phases, dict) and all(
        isinstance(v, list) and all(x is None or isinstance(x, int | float) for x in v)
        for v in phases.values()
    )
    return b if ok and isinstance(b.get("comm_ms"), list) else {}


def _startup(r: RunRecord) -> dict[str, Any]:
    """The record's start-up when well formed, else {} (older records have none)."""
    s: Any = r.get("startup")
    ok = (
        isinstance(s, dict)
        and isinstance(s.get("total_s"), int | float)
        and isinstance(s.get("phases_s"), dict)
        and isinstance(s.get("from"), str)
    )
    return s if ok else {}


def link_suffix(r: RunRecord) -> str:
    """'/200mbit' for a run over an emulated link (its own variant), else ''."""
    link = r.get("link")
    if not isinstance(link, dict) or not isinstance(link.get("rate_bps"), int):
        return ""
    return "/" + format_rate(link["rate_bps"]) + ("" if link.get("emulated") else " link")


def synced_launches(folder: Path) -> pd.DataFrame:
    """One results folder's ok launches that synchronised gradients, in record order:
    what a head-to-head decision reads (a compute-only twin is no engine's throughput)."""
    return usable(frame(records.load_summaries([records.results_file(folder)]).records))


def frame(recs: Iterable[LoadedRecord], target: float = DEFAULT_TARGET) -> pd.DataFrame:
    """One row per training record with the columns the reports use."""
    return pd.DataFrame(
        [_row(r, target) for r in recs if r.get("kind", Kind.TRAIN) == Kind.TRAIN and not _trial(r)]
    )


def _trial(r: RunRecord) -> bool:
    """A `bench tune` trial: a search step, not a measurement (bench/tables/tuning.py)."""
    labels = r.get("labels")
    return isinstance(labels, dict) and labels.get("tuning") == "trial"


def _row(r: LoadedRecord, target: float) -> dict[str, Any]:
    spec = r.get("spec") or {}
    fps = r.get("fingerprints") or {}
    res = r.get("resources") or {}
    flops: Mapping[str, Any] = r.get("flops_per_sample") or {}
    machine, libraries = _context(r)
    oversub, budget_text = derived.oversubscription(r)
    engine = variant(r) + _pinned(r) + _aa_suffix(r)
    protocol = records.protocol_version(r)
    return {
        "run_id": r.get("run_id"),
        "source": r.get("_source"),
        "status": r.get("status"),
        # a multi-node run is its own variant: same workers, different network
        "engine": engine
        + (f"@{r['nodes']}nodes" if (r.get("nodes") or 1) > 1 else "")
        + link_suffix(r),
        "single_node_engine": engine,  # what its efficiency is measured against
        "workers": r.get("world_size"),
        "model": spec.get("model"),
        "dataset": spec.get("dataset"),
        "seed": spec.get("seed"),
        "grad_sync": spec.get("grad_sync", True),
        "group": comparison_key(r),
        "twin_group": group_key(
            {**spec, "grad_sync": False}, machine, libraries, protocol=protocol
        ),
        # the same spec on any machine (BASE/NEW)
        "spec_group": group_key(spec, protocol=protocol),
        # the same spec, machine and libraries under any protocol (to say why apart)
        "any_protocol": group_key(spec, machine, libraries, protocol=0),
        "spec_any_protocol": group_key(spec, protocol=0),
        "protocol": protocol,
        "title": _title(spec),
        # the spec, seed aside, as its comparison shares it (the summary's commands)
        "spec": json.dumps({k: v for k, v in spec.items() if k != "seed"}, sort_keys=True),
        "throughput": r.get("throughput"),
        **_noise_columns(r),
        "train_flops": flops.get("train") or np.nan,
        **_why_columns(r),
        "rank_throughput": r.get("per_rank_throughput") or [],
        # per-run step-time quantiles over every rank's timed steps (from the record's
        # arrays, or from its summary: records.summarise)
        **_step_quantiles(r),
        "final_accuracy": r.get("final_accuracy"),
        "step_losses": r.get("step_losses") or [],
        "time_to_target": time_to_target(r.get("epochs") or [], target),
        "peak_rss_mb": max(res.get("peak_rss_mb") or [np.nan]),
        "input_ms": max((r.get("input_pipeline") or {}).get("ms_per_step") or [np.nan]),
        "cpu_util": float(np.mean(res.get("cpu_utilisation") or [np.nan])),
        "init_fp": fps.get("init_weights"),
        "data_fp": fps.get("data_order"),
        "machine": machine,
        "libraries": libraries,
        "oversubscribed": oversub,
        "cpu_budget_text": budget_text,  # the record's cpu_budget as compare's note prints it
        "knobs": json.dumps(r.get("knobs", {}), sort_keys=True),
        "math": _math(r.get("knobs") or {}),
        "error": r.get("error"),
    }


def _pinned(r: RunRecord) -> str:
    """'[pinned]' for a run whose workers were pinned to cores (--pin-cores): a lever
    under test, compared as a variant of its engine."""
    threads = r.get("threads")
    return "[pinned]" if isinstance(threads, dict) and "pinned_cores" in threads else ""


def _aa_suffix(r: RunRecord) -> str:
    """'~A' or '~B' for a side of an A/A experiment (bench run --aa): one engine under two
    names, so that every table and decision treats the sides as two engines."""
    labels = r.get("labels")
    aa = labels.get("aa") if isinstance(labels, dict) else None
    return f"~{aa}" if isinstance(aa, str) and aa else ""


def _noise_columns(r: LoadedRecord) -> dict[str, Any]:
    """What the noise levels and the sequential decisions read (bench/tables/noise.py,
    bench/decide/pairs.py): the launch's windows, what the launch cost from the sweep's start of
    it to its launcher's exit, and which repeat of its cell it was."""
    labels = r.get("labels")
    return {
        "windows": r.get("window_stats") or records.window_stats(r),
        "launch_s": _seconds(r.get("launch_to_exit_s")) or _seconds(r.get("launch_to_stop_s")),
        "repeat": labels.get("repeat") if isinstance(labels, dict) else None,
        # the cell a row came from, as bench run --decide-at launches it again
        "engine_name": str(r.get("engine")),
        "aa": _aa_suffix(r)[1:],
        # launched by bench run --decide-at (its precision): read at the loop's looks
        "decide_at": labels.get("decide_at") if isinstance(labels, dict) else None,
    }


def _seconds(x: Any) -> float | None:
    ok = isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and x > 0
    return float(x) if ok else None


def contention_cause(r: Mapping[str, Any]) -> str:
    """Why a run is flagged `contended`: "other processes", "steal" (the hypervisor gave
    its CPUs' time to other guests), both, "unknown"; "" when it is not flagged."""
    if not r.get("contended"):
        return ""
    found = {
        cause
        for c in r.get("contention") or []
        if isinstance(c, dict)
        for cause in contention.causes(c.get("other_cpu_cores"), c.get("steal_fraction"))
    }
    return " and ".join(sorted(found)) or "unknown"


MATH_KEYS = ("tf32_matmul", "tf32_conv", "cudnn_benchmark", "cudnn_deterministic")


def _math(knobs: dict[str, Any]) -> str:
    """How fp32 maths ran (TF32, cuDNN modes), in words, from a record's `math` knobs."""
    math = knobs.get("math")
    if not isinstance(math, dict):
        return "not recorded"
    words = [f"{k.replace('_', ' ')} {'on' if math.get(k) else 'off'}" for k in MATH_KEYS]
    if math.get("nvidia_tf32_override") is not None:
        words.append(f"NVIDIA_TF32_OVERRIDE={math['nvidia_tf32_override']}")
    return ", ".join(words)


def _step_quantiles(r: LoadedRecord) -> dict[str, float]:
    q = r.get("step_time_quantiles")
    if q is None:
        steps = [t for rank in r.get("step_times_s") or [] for t in rank]
        if not steps:
            return {"step_p50": np.nan, "step_p95": np.nan}
        p50, p95 = np.percentile(np.asarray(steps, dtype=float), [50, 95])
        return {"step_p50": float(p50), "step_p95": float(p95)}
    return {"step_p50": float(q["p50"]), "step_p95": float(q["p95"])}
