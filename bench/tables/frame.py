"""From records on disk to one table of runs: the frame every comparison is drawn from.

Records are grouped by their spec minus the seed, their machine (CPU model and
count, GPUs), their library versions and the measurement protocol that timed
them: one comparison covers only runs that were asked to do the same thing on
the same hardware and software, timed the same way, so no median pools two
machines or two protocols. Every number is computed from records that `bench
compare --sources` lists, so each can be traced to a line of a results file.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from bench import engines, records
from bench.contract.identity import GROUP_FIELDS_V1, canonical
from bench.core import machine
from bench.core.units import format_rate
from bench.measure import contention
from bench.records import Kind, LoadedRecord, RunRecord, Status, summaries
from bench.records.cache import ColumnCache
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
    return usable(read([records.results_file(folder)])[0].frame)


@dataclasses.dataclass
class Runs:
    """What a comparison reads: the frame (one row per training run) and the records read
    whole (`SUMMARY_KEPT`: predictions, collectives, bench tune's), of `count` records."""

    frame: pd.DataFrame
    records: list[LoadedRecord]
    count: int


def frame(recs: Iterable[LoadedRecord], target: float = DEFAULT_TARGET) -> pd.DataFrame:
    """One row per training record with the columns the reports use."""
    recs = list(recs)
    rows, _ = ROWS.rows(recs)
    rows["source"] = [r.get("_source") for r in recs]
    return _finish(rows, target)


def read(
    paths: Iterable[str | Path], target: float = DEFAULT_TARGET
) -> tuple[Runs, records.Loaded]:
    """The runs under `paths` from each file's columnar cache of frame rows (built or
    grown as needed: bench/records/cache.py): no record is read whole but the few
    `SUMMARY_KEPT` ones, which come back as summaries in the Loaded beside the problems."""
    files, problems, skipped = records.files_under(paths)
    parts, kept = [], []
    for path in files:
        try:
            rows, bad = ROWS.read(path)
        except OSError as exc:
            problems.append(records.Problem(str(path), 0, f"cannot read: {exc.strerror}"))
            continue
        problems.extend(bad)
        rows["source"] = [f"{path}:{n}" for n in rows["line"].tolist()]
        for source, summary in zip(rows["source"], rows["summary"], strict=True):
            if summary is not None:
                kept.append(cast(LoadedRecord, {**summary, "_source": source}))
        parts.append(rows)
    rows = pd.concat(parts, ignore_index=True) if parts else ROWS.rows([])[0]
    runs = Runs(_finish(rows, target), kept, len(rows))
    return runs, records.Loaded(kept, problems, skipped)


def _trial(r: Mapping[str, Any]) -> bool:
    """A `bench tune` trial: a search step, not a measurement (bench/tables/tuning.py)."""
    labels = r.get("labels")
    return isinstance(labels, dict) and labels.get("tuning") == "trial"


def _kept(r: LoadedRecord) -> bool:
    """Read whole by compare beside the frame: not a training run, or one of bench tune's."""
    labels = r.get("labels")
    tuning = isinstance(labels, dict) and labels.get("tuning") is not None
    return r.get("kind", Kind.TRAIN) != Kind.TRAIN or tuning


def _stored_row(r: LoadedRecord) -> dict[str, Any]:
    """What the frame keeps of one record, before the figures read across rows (`_finish`):
    computed once per record and cached with it (`ROWS`)."""
    spec = r.get("spec") or {}
    fps = r.get("fingerprints") or {}
    res = r.get("resources") or {}
    flops: Mapping[str, Any] = r.get("flops_per_sample") or {}
    machine, libraries = _context(r)
    oversub, budget_text = derived.oversubscription(r)
    layout = derived.layouts(r)[0]
    quantiles = r.get("step_time_quantiles") or summaries.step_quantiles(r)
    return {
        "run_id": r.get("run_id"),
        "status": r.get("status"),
        "kind": str(r.get("kind", Kind.TRAIN)),
        "trial": _trial(r),
        "summary": summaries.summarise(r) if _kept(r) else None,
        "engine_name": str(r.get("engine")),
        "engine_options": json.dumps(r.get("engine_options") or {}, sort_keys=True),
        "pinned": _pinned(r),
        "nodes": int(r.get("nodes") or 1),
        "link": link_suffix(r),
        "workers": r.get("world_size"),
        "model": spec.get("model"),
        "dataset": spec.get("dataset"),
        "seed": spec.get("seed"),
        "grad_sync": spec.get("grad_sync", True),
        "protocol": records.protocol_version(r),
        "spec": json.dumps({k: v for k, v in spec.items() if k != "seed"}, sort_keys=True),
        "throughput": r.get("throughput"),
        **_noise_columns(r),
        "train_flops": flops.get("train") or np.nan,
        **_why_columns(r),
        "layout": dataclasses.astuple(layout),
        "rank_throughput": r.get("per_rank_throughput") or [],
        "step_p50": np.nan if quantiles is None else float(quantiles["p50"]),
        "step_p95": np.nan if quantiles is None else float(quantiles["p95"]),
        "final_accuracy": r.get("final_accuracy"),
        "step_losses": summaries.loss_points(r) or [],
        "epochs": [[e.get("train_time_s"), e.get("test_accuracy")] for e in r.get("epochs") or []],
        "peak_rss_mb": max(res.get("peak_rss_mb") or [np.nan]),
        "input_ms": max((r.get("input_pipeline") or {}).get("ms_per_step") or [np.nan]),
        "cpu_util": float(np.mean(res.get("cpu_utilisation") or [np.nan])),
        "init_fp": fps.get("init_weights"),
        "data_fp": fps.get("data_order"),
        "machine": machine,
        "libraries": libraries,
        "oversubscribed": oversub,
        "cpu_budget_text": budget_text,
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
        "windows": r.get("window_stats") or summaries.window_stats(r),
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


# What the runs cache keeps per record (`_stored_row`), by kind (bench/records/cache.py).
# Bump FRAME_VERSION when a stored column changes meaning, or the code it is read off
# (here, bench/tables/derived.py, an engine's comm_threads) computes it differently.
FRAME_VERSION = 3  # 2: device; 3: cpu["held"] (the straggler rule reads both)
_STORED = {
    **dict.fromkeys(["run_id", "status", "kind", "engine_name", "engine_options"], "str"),
    **dict.fromkeys(["pinned", "link", "model", "dataset", "spec", "aa"], "str"),
    **dict.fromkeys(["init_fp", "data_fp", "machine", "libraries", "knobs", "math"], "str"),
    **dict.fromkeys(["contention_cause", "cpu_budget_text", "error", "device"], "str"),
    **dict.fromkeys(["trial", "contended", "oversubscribed"], "bool"),
    **dict.fromkeys(["nodes", "workers", "protocol"], "int"),
    **dict.fromkeys(["throughput", "launch_s", "train_flops", "peak_gflops", "step_s"], "float"),
    **dict.fromkeys(["step_p50", "step_p95", "final_accuracy", "peak_rss_mb"], "float"),
    **dict.fromkeys(["input_ms", "cpu_util"], "float"),
    **dict.fromkeys(["summary", "seed", "grad_sync", "windows", "repeat", "decide_at"], "json"),
    **dict.fromkeys(["startup", "energy", "breakdown", "global_batch", "cpu"], "json"),
    **dict.fromkeys(["per_worker_batch", "layout", "rank_throughput", "step_losses"], "json"),
    "epochs": "json",
}
ROWS = ColumnCache("runs", FRAME_VERSION, _STORED, _stored_row)

# The frame's columns, in order.
COLUMNS = ["run_id", "source", "status", "engine", "single_node_engine", "workers", "model"]
COLUMNS += ["dataset", "seed", "grad_sync", "group", "twin_group", "spec_group"]
COLUMNS += ["any_protocol", "spec_any_protocol", "protocol", "title", "spec", "throughput"]
COLUMNS += ["windows", "launch_s", "repeat", "engine_name", "aa", "decide_at", "train_flops"]
COLUMNS += ["peak_gflops", "startup", "nodes", "energy", "breakdown", "global_batch"]
COLUMNS += ["per_worker_batch", "cpu", "contended", "contention_cause", "layout", "step_s"]
COLUMNS += ["device"]
COLUMNS += ["rank_throughput", "step_p50", "step_p95", "final_accuracy", "step_losses"]
COLUMNS += ["time_to_target", "peak_rss_mb", "input_ms", "cpu_util", "init_fp", "data_fp"]
COLUMNS += ["machine", "libraries", "oversubscribed", "cpu_budget_text", "knobs", "math", "error"]


def _finish(rows: pd.DataFrame, target: float) -> pd.DataFrame:
    """The frame from the stored rows: training runs only (no tune trial), with what is
    read across rows computed once per distinct value, column by column: engine names,
    the comparison keys and titles of each distinct spec, layouts, times to target."""
    keep = (rows["kind"] == Kind.TRAIN) & ~rows["trial"].fillna(False).astype(bool)
    df = rows[keep].reset_index(drop=True)
    if df.empty:
        return pd.DataFrame()
    naming = ["engine_name", "engine_options", "knobs", "pinned", "aa", "nodes", "link"]
    names = _each(df, naming, _names)
    df["engine"] = [n[0] for n in names]
    df["single_node_engine"] = [n[1] for n in names]
    keys = _each(df, ["spec", "machine", "libraries", "protocol"], _keys)
    for i, name in enumerate(["group", "twin_group", "spec_group", "any_protocol"]):
        df[name] = [k[i] for k in keys]
    df["spec_any_protocol"] = [k[4] for k in keys]
    df["title"] = [k[5] for k in keys]
    df["layout"] = [_layout(v) for v in df["layout"]]
    df["time_to_target"] = [_to_target(e, target) for e in df["epochs"]]
    return df[COLUMNS]


def _each(df: pd.DataFrame, columns: list[str], fn: Any) -> list[Any]:
    """`fn(*values)` of each row's `columns`, called once per distinct combination."""
    seen: dict[tuple[Any, ...], Any] = {}
    out = []
    for values in zip(*(df[c].tolist() for c in columns), strict=True):
        if values not in seen:
            seen[values] = fn(*values)
        out.append(seen[values])
    return out


def _names(
    engine: str, options: str, knobs: str, pinned: str, aa: str, nodes: Any, link: str
) -> tuple[str, str]:
    """(engine as compare names it, the same on one node: what its efficiency is read
    against); a multi-node run is its own variant, as is a run over an emulated link."""
    found = {"engine": engine, "engine_options": json.loads(options), "knobs": json.loads(knobs)}
    single = variant(cast(RunRecord, found)) + pinned + (f"~{aa}" if aa else "")
    many = f"@{int(nodes)}nodes" if nodes == nodes and int(nodes) > 1 else ""
    return single + many + link, single


def _keys(spec_text: str, machine: str, libraries: str, protocol: Any) -> tuple[str, ...]:
    """The comparison keys of one spec (seed aside) on one machine and library set (see
    `group_key`), and its title."""
    spec = json.loads(spec_text)
    version = int(protocol) if protocol == protocol else 1
    return (
        group_key(spec, machine, libraries, protocol=version),
        group_key({**spec, "grad_sync": False}, machine, libraries, protocol=version),
        # the same spec on any machine (BASE/NEW)
        group_key(spec, protocol=version),
        # the same spec, machine and libraries under any protocol (to say why apart)
        group_key(spec, machine, libraries, protocol=0),
        group_key(spec, protocol=0),
        _title(spec),
    )


@functools.lru_cache(maxsize=1024)
def _layout_of(fields: tuple[int, ...]) -> derived.Layout:
    return derived.Layout(*fields)


def _layout(value: Any) -> derived.Layout:
    return _layout_of(tuple(value))


def _to_target(epochs: Any, target: float) -> float | None:
    return time_to_target(
        [{"train_time_s": t, "test_accuracy": a} for t, a in epochs or []], target
    )
