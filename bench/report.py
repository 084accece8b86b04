"""From records on disk to comparison tables (pandas).

Records are grouped by their spec minus the seed, their machine (CPU model and
count, GPUs) and their library versions: one comparison covers only runs that
were asked to do the same thing on the same hardware and software, so no median
pools two machines; each comparison names its machine. Compute-only twins (spec
`grad_sync=false`) are not shown as tables of their own; they give the
communication share of their synchronised group. Every number is computed from
the records that `bench compare --sources` lists, so each can be traced to a
line of a results file.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from bench import env as benv
from bench import records, stats
from bench.record import Epoch, LoadedRecord, RunRecord, Spec
from bench.spec import GROUP_FIELDS_V1, canonical

# Spec fields that may differ between the runs of one comparison.
VARYING = ("seed",)
DEFAULT_TARGET = 0.95
# Accuracy parity: an engine is flagged when its mean accuracy differs from the
# other engines' by more than this many seed-to-seed standard deviations (and by
# at least PARITY_FLOOR, so that near-identical runs with sd ~ 0 are not flagged).
PARITY_SDS = 2.0
PARITY_FLOOR = 0.005


@dataclasses.dataclass
class Comparison:
    title: str
    group: str
    sections: dict[str, pd.DataFrame]
    notes: list[str]
    machine: str = "?"
    libraries: str = ""
    run_ids: list[str] = dataclasses.field(default_factory=list)
    # The numbers behind the tables' intervals, for plots and json/csv: one row per
    # (engine, workers, metric) with value, low, high (None without an interval) and n.
    # Metrics: samples/s, efficiency, twin samples/s (the compute-only twin), comm %
    # (a share, 0..1), vs fastest.
    intervals: pd.DataFrame = dataclasses.field(default_factory=pd.DataFrame)

    @property
    def frame(self) -> pd.DataFrame:
        return self.sections["throughput"]


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
    if protocol != 1:
        context = (*context, f"protocol {protocol}")
    text = json.dumps([fixed, *context] if context else fixed, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def libraries_text(libraries: Mapping[str, Any]) -> str:
    """'numpy 2.1.0, torch 2.5.1': the versions a comparison's records share."""
    return ", ".join(f"{k} {v}" for k, v in sorted(libraries.items())) or "versions not recorded"


def _context(r: RunRecord) -> tuple[str, str]:
    """(machine, library versions as JSON): what one comparison never pools."""
    env = r.get("env") or {}
    return benv.machine_key(env), json.dumps(env.get("libraries", {}), sort_keys=True)


def comparison_key(r: RunRecord) -> str:
    """The comparison a record belongs to: its spec minus the seed, on its machine with
    its library versions, under its measurement protocol (`group_key`)."""
    return group_key(r.get("spec") or {}, *_context(r), protocol=records.protocol_version(r))


def finished(recs: Iterable[LoadedRecord], kind: str = "train") -> list[LoadedRecord]:
    """The runs of `kind` (a record without one is a training run) that finished with
    status ok: the runs whose numbers a table or an export measures."""
    return [
        r for r in recs if r.get("kind", "train") == kind and r.get("status") == records.Status.OK
    ]


def synced_ok(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of `frame` that finished and averaged gradients (not compute-only twins)."""
    return df[(df["status"] == records.Status.OK) & df["grad_sync"].astype(bool)]


def oversubscription(r: RunRecord) -> tuple[bool, str]:
    """(oversubscribed?, 'W workers x T threads > C CPUs') for a record.

    Records written before runners computed it are judged from the machine's CPU
    count (marked 'inferred'); multi-node ones are not judged.
    """
    budget: Mapping[str, Any] = r.get("cpu_budget") or {}
    if "oversubscribed" in r and budget:
        w, t, c = (budget.get(k) for k in ("workers_on_host", "threads_per_worker", "usable_cpus"))
        return bool(r["oversubscribed"]), f"{w} workers x {t} threads > {c} CPUs"
    cpus = (r.get("env") or {}).get("cpu_count")
    threads = (r.get("spec") or {}).get("threads") or 1
    workers = r.get("world_size") or 1
    if not cpus or (r.get("nodes") or 1) > 1:
        return False, ""
    return (
        workers * threads > cpus,
        f"{workers} workers x {threads} threads > {cpus} CPUs (inferred)",
    )


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


def _variant(r: RunRecord) -> str:
    """The engine as compare names it: `horovod[mpi]` for Horovod's MPI controller (the one
    that ran, from knobs), then every other option that changes training, `[key=value]`."""
    options = dict(r.get("engine_options") or {})
    controller = (r.get("knobs") or {}).get("controller") or options.get("controller")
    options.pop("controller", None)
    return (
        str(r.get("engine"))
        + (f"[{controller}]" if controller not in (None, "gloo") else "")
        + "".join(f"[{k}={v}]" for k, v in sorted(options.items()))
    )


def link_suffix(r: RunRecord) -> str:
    """'/200mbit' for a run over an emulated link (its own variant), else ''."""
    link = r.get("link")
    if not isinstance(link, dict) or not isinstance(link.get("rate_bps"), int):
        return ""
    from bench.netns import format_rate

    return "/" + format_rate(link["rate_bps"]) + ("" if link.get("emulated") else " link")


def frame(recs: Iterable[LoadedRecord], target: float = DEFAULT_TARGET) -> pd.DataFrame:
    """One row per training record with the columns the reports use."""
    rows = []
    for r in recs:
        if r.get("kind", "train") != "train":
            continue
        spec = r.get("spec") or {}
        fps = r.get("fingerprints") or {}
        res = r.get("resources") or {}
        flops: Mapping[str, Any] = r.get("flops_per_sample") or {}
        twin = {**spec, "grad_sync": False}
        machine, libraries = _context(r)
        oversub, budget = oversubscription(r)
        variant = _variant(r)
        protocol = records.protocol_version(r)
        rows.append(
            {
                "run_id": r.get("run_id"),
                "source": r.get("_source"),
                "status": r.get("status"),
                # a multi-node run is its own variant: same workers, different network
                "engine": variant
                + (f"@{r['nodes']}nodes" if (r.get("nodes") or 1) > 1 else "")
                + link_suffix(r),
                "single_node_engine": variant,  # what its efficiency is measured against
                "workers": r.get("world_size"),
                "model": spec.get("model"),
                "dataset": spec.get("dataset"),
                "seed": spec.get("seed"),
                "grad_sync": spec.get("grad_sync", True),
                "group": comparison_key(r),
                "twin_group": group_key(twin, machine, libraries, protocol=protocol),
                # the same spec on any machine (BASE/NEW)
                "spec_group": group_key(spec, protocol=protocol),
                "title": _title(spec),
                "throughput": r.get("throughput"),
                # other processes used the CPUs while it was timed (bench/contention.py)
                "contended": bool(r.get("contended")),
                "train_flops": flops.get("train") or np.nan,
                "rank_throughput": r.get("per_rank_throughput") or [],
                # per-run step-time quantiles over every rank's timed steps (from the
                # record's arrays, or from its summary: records.summarise)
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
                "cpu_budget": budget,
                "knobs": json.dumps(r.get("knobs", {}), sort_keys=True),
                "math": _math(r.get("knobs") or {}),
                "error": r.get("error"),
            }
        )
    return pd.DataFrame(rows)


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


_NOT_FAILED = (records.Status.OK, records.Status.UNAVAILABLE)


def _step_quantiles(r: LoadedRecord) -> dict[str, float]:
    q = r.get("step_time_quantiles")
    if q is None:
        steps = [t for rank in r.get("step_times_s") or [] for t in rank]
        if not steps:
            return {"step_p50": np.nan, "step_p95": np.nan}
        p50, p95 = np.percentile(np.asarray(steps, dtype=float), [50, 95])
        return {"step_p50": float(p50), "step_p95": float(p95)}
    return {"step_p50": float(q["p50"]), "step_p95": float(q["p95"])}


def _interval(est: stats.Estimate, spec: str) -> str:
    """'[low, high] n=N', or 'too few runs (n=N)': every interval shows its run count."""
    return est.interval(spec)


def _ok(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["status"] == records.Status.OK]


def _keep(
    iv: list[dict[str, Any]], engine: str, workers: int, metric: str, est: stats.Estimate
) -> None:
    iv.append(
        {
            "engine": engine,
            "workers": int(workers),
            "metric": metric,
            "value": est.value,
            "low": est.low,
            "high": est.high,
            "n": est.n,
        }
    )


def _lost_share(ratio: stats.Estimate) -> stats.Estimate:
    """1 - synchronised/compute-only throughput: the share lost to communication."""
    low = None if ratio.high is None else 1 - ratio.high
    high = None if ratio.low is None else 1 - ratio.low
    return stats.Estimate(1 - ratio.value, low, high, ratio.n, ratio.method)


def _contended(cell: pd.DataFrame) -> str:
    """'k/n' runs of a cell measured while other processes used the CPUs; '-' for none."""
    k = int(cell["contended"].sum()) if "contended" in cell else 0
    return f"{k}/{len(cell)}" if k else "-"


def _throughput_rows(
    gdf: pd.DataFrame, twins: pd.DataFrame, iv: list[dict[str, Any]]
) -> pd.DataFrame:
    ok = _ok(gdf)
    rows = []
    for (engine, workers), cell in gdf.groupby(["engine", "workers"]):
        good = _ok(cell)
        row: dict[str, Any] = {
            "engine": engine,
            "workers": int(workers),
            "runs": len(good),
            # an engine not installed here did not fail: its records say so in the notes
            "failed": int((~cell["status"].isin(_NOT_FAILED)).sum()),
            "samples/s": np.nan,
            "95% CI": "-",
            "efficiency": np.nan,
            "eff. 95% CI": "-",
            "comm %": "-",
            "contended": _contended(good),
        }
        if len(good):
            tp = good["throughput"].tolist()
            est = stats.estimate(tp)
            row["samples/s"], row["95% CI"] = est.value, _interval(est, ",.0f")
            _keep(iv, engine, workers, "samples/s", est)
            # multi-node variants scale from the same engine's one worker
            single = cell["single_node_engine"].iloc[0]
            base = ok[(ok["engine"] == single) & (ok["workers"] == 1)]["throughput"].tolist()
            if base:
                eff = stats.ratio(tp, base, float(workers))
                row["efficiency"], row["eff. 95% CI"] = eff.value, _interval(eff, ".2f")
                _keep(iv, engine, workers, "efficiency", eff)
            nosync = _ok(twins[(twins["engine"] == engine) & (twins["workers"] == workers)])
            if workers > 1 and len(nosync):
                # share of the compute-only throughput lost to unhidden communication
                ratio = stats.ratio(tp, nosync["throughput"].tolist())
                _keep(
                    iv,
                    engine,
                    workers,
                    "twin samples/s",
                    stats.estimate(nosync["throughput"].tolist()),
                )
                _keep(iv, engine, workers, "comm %", _lost_share(ratio))
                share = f"{1 - ratio.value:.0%}"
                if ratio.low is not None and ratio.high is not None:
                    share += f" [{1 - ratio.high:.0%}, {1 - ratio.low:.0%}] n={ratio.n}"
                else:
                    share += f" {stats.TOO_FEW} (n={ratio.n})"
                row["comm %"] = share
        rows.append(row)
    return pd.DataFrame(rows).sort_values(["workers", "engine"]).reset_index(drop=True)


def _rank_rows(gdf: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (engine, workers), cell in _ok(gdf).groupby(["engine", "workers"]):
        # per run: its slowest, median and fastest rank; the table shows medians over runs
        ranks = [(min(r), float(np.median(r)), max(r)) for r in cell["rank_throughput"] if r]
        lo, mid, hi = (
            (np.array(col, dtype=float) for col in zip(*ranks, strict=True))
            if ranks
            else (np.array([]),) * 3
        )
        p50, p95 = cell["step_p50"].dropna(), cell["step_p95"].dropna()
        rows.append(
            {
                "engine": engine,
                "workers": int(workers),
                "rank min/s": float(np.median(lo)) if lo.size else np.nan,
                "rank median/s": float(np.median(mid)) if mid.size else np.nan,
                "rank max/s": float(np.median(hi)) if hi.size else np.nan,
                # medians over runs of each run's own step-time percentiles
                "step p50 ms": float(p50.median() * 1e3) if len(p50) else np.nan,
                "step p95 ms": float(p95.median() * 1e3) if len(p95) else np.nan,
                # building a step's batch (augmentation included), outside the timed loop
                "input ms": float(cell["input_ms"].median()),
                # achieved compute: median throughput x training FLOPs per sample
                "GFLOP/s": float(cell["throughput"].median() * cell["train_flops"].iloc[0] / 1e9),
                "peak RSS MB": float(cell["peak_rss_mb"].max()),
                "CPU util": float(cell["cpu_util"].mean()),
                "contended": _contended(cell),
            }
        )
    return (
        pd.DataFrame(rows).sort_values(["workers", "engine"]).reset_index(drop=True)
        if rows
        else pd.DataFrame()
    )


def _loss_trajectory(runs: pd.Series) -> str:
    """Mean training loss over runs at the first, middle and last step: how the runs
    descended, so variants that reduce differently (e.g. Adasum vs averaging) compare."""
    curves = [np.asarray(c, dtype=float) for c in runs if len(c)]
    n = min((len(c) for c in curves), default=0)
    if not n:
        return "-"
    mean = np.mean([c[:n] for c in curves], axis=0)
    return " / ".join(f"{mean[i]:.4g}" for i in (0, n // 2, n - 1))


def _accuracy_rows(gdf: pd.DataFrame, target: float) -> pd.DataFrame:
    ok = _ok(gdf)
    rows = []
    for (engine, workers), cell in ok.groupby(["engine", "workers"]):
        acc = cell["final_accuracy"].astype(float)
        same_w = ok[ok["workers"] == workers]
        others = same_w[same_w["engine"] != engine]["final_accuracy"].astype(float)
        # seed-to-seed variation: spread within each engine, pooled
        within = [
            g["final_accuracy"].astype(float).std(ddof=1)
            for _, g in same_w.groupby("engine")
            if len(g) > 1
        ]
        sd = float(np.sqrt(np.mean(np.square(within)))) if within else np.nan
        if others.empty:
            parity = "-"
        elif np.isnan(sd):
            parity = "n/a (1 run)"
        else:
            gap = float(acc.mean() - others.mean())
            parity = f"{gap:+.2%}" + (
                " FLAG" if abs(gap) > max(PARITY_SDS * sd, PARITY_FLOOR) else " ok"
            )
        ttt = cell["time_to_target"].dropna()
        rows.append(
            {
                "engine": engine,
                "workers": int(workers),
                "runs": len(cell),
                "accuracy": float(acc.mean()),
                "acc. sd": float(acc.std(ddof=1)) if len(acc) > 1 else np.nan,
                f"time to {target:.0%} s": float(ttt.median()) if len(ttt) else np.nan,
                "reached": f"{len(ttt)}/{len(cell)}",
                "parity vs others": parity,
                "train loss start/mid/end": _loss_trajectory(cell["step_losses"]),
            }
        )
    return (
        pd.DataFrame(rows).sort_values(["workers", "engine"]).reset_index(drop=True)
        if rows
        else pd.DataFrame()
    )


def _head_to_head_rows(gdf: pd.DataFrame, iv: list[dict[str, Any]]) -> pd.DataFrame:
    rows = []
    for workers, same_w in _ok(gdf).groupby("workers"):
        by_engine = {e: g["throughput"].tolist() for e, g in same_w.groupby("engine")}
        flagged = {e: _contended(g) for e, g in same_w.groupby("engine")}
        best = max(by_engine, key=lambda e: float(np.median(by_engine[e])))
        for engine, tp in sorted(by_engine.items()):
            est = stats.ratio(tp, by_engine[best])
            _keep(iv, engine, workers, "vs fastest", est)
            if engine == best:
                verdict = "fastest"
            elif est.high is None:
                verdict = stats.TOO_FEW  # fewer than stats.MIN_RUNS on a side: no verdict
            else:
                verdict = "slower (significant)" if est.high < 1.0 else "not significant"
            rows.append(
                {
                    "workers": int(workers),
                    "engine": engine,
                    "vs fastest": est.value,
                    "95% CI": _interval(est, ".2f"),
                    "verdict": verdict,
                    "contended": flagged[engine],
                }
            )
    return pd.DataFrame(rows)


def _notes(gdf: pd.DataFrame) -> list[str]:
    notes = []
    ok = _ok(gdf)
    if not ok.empty:
        for column, what, per_workers in (
            ("init_fp", "initial-weight fingerprints", False),
            ("data_fp", "data-order fingerprints", True),
        ):
            keys = ["workers", "seed"] if per_workers else ["seed"]
            for _, g in ok.groupby(keys):
                if g[column].nunique() > 1:
                    detail = ", ".join(
                        f"{e}={fp}" for e, fp in g.groupby("engine")[column].first().items()
                    )
                    notes.append(
                        f"WARNING: {what} differ between engines ({detail}): not comparable"
                    )
                    break
        if ok["init_fp"].nunique() == 1:
            notes.append(
                f"initial weights identical across engines (fingerprint {ok['init_fp'].iloc[0]})"
            )
        if ok["math"].nunique() > 1:
            detail = "; ".join(
                f"{e}: {' | '.join(sorted(m.unique()))}" for e, m in ok.groupby("engine")["math"]
            )
            notes.append(f"WARNING: fp32 maths differ between runs ({detail}): not comparable")
        else:
            notes.append(f"fp32 maths identical across engines: {ok['math'].iloc[0]}")
        for engine, knobs in ok.groupby("engine")["knobs"]:
            notes.append(f"knobs {engine}: " + " | ".join(sorted(knobs.unique())))
    over = gdf[gdf["oversubscribed"].astype(bool)]
    if not over.empty:
        cells = sorted(
            {f"{e} np={w}: {b}" for e, w, b in over[["engine", "workers", "cpu_budget"]].values}
        )
        notes.append(
            "WARNING: oversubscribed (more worker threads than usable CPUs; the timings "
            "measure CPU contention): " + "; ".join(cells)
        )
    absent = gdf[gdf["status"] == records.Status.UNAVAILABLE]
    for engine, rows in absent.groupby("engine"):
        first = (rows["error"].iloc[0] or "").strip().splitlines()[:1]
        notes.append(
            f"unavailable: {engine} not installed where it ran, {len(rows)} run(s) recorded "
            f"without launching: {first[0] if first else 'no reason given'}"
        )
    if not ok.empty and ok["contended"].any():
        notes.append(
            f"WARNING: {int(ok['contended'].sum())} of {len(ok)} runs were measured while other "
            "processes used the CPUs (column 'contended'): their throughput is understated, "
            "and not equally for every engine; rerun them on a quiet machine"
        )
    for _, bad in gdf[~gdf["status"].isin(_NOT_FAILED)].iterrows():
        first = (bad["error"] or "").strip().splitlines()[:1]
        notes.append(
            f"{bad['status']}: {bad['engine']} np={bad['workers']} ({bad['source']}): "
            f"{first[0] if first else 'no error text'}"
        )
    return notes


def compare(recs: Iterable[LoadedRecord], target: float = DEFAULT_TARGET) -> list[Comparison]:
    """One comparison per distinct synchronised spec (seed aside), sorted by title."""
    df = frame(recs, target)
    if df.empty:
        return []
    out = []
    synced = df[df["grad_sync"].astype(bool)]
    twins_all = df[~df["grad_sync"].astype(bool)]
    for group, gdf in synced.groupby("group", sort=False):
        twins = twins_all[twins_all["group"] == gdf["twin_group"].iloc[0]]
        iv: list[dict[str, Any]] = []
        sections = {
            "throughput": _throughput_rows(gdf, twins, iv),
            "per rank": _rank_rows(gdf),
            "accuracy": _accuracy_rows(gdf, target),
            "head to head": _head_to_head_rows(gdf, iv),
        }
        _flag_oversubscribed(sections, gdf)
        notes = _notes(gdf)
        if len(twins):
            notes.append(f"comm %: from {len(twins)} compute-only twin run(s) (grad_sync=false)")
        out.append(
            Comparison(
                str(gdf["title"].iloc[0]),
                str(group),
                sections,
                notes,
                machine=str(gdf["machine"].iloc[0]),
                libraries=libraries_text(json.loads(gdf["libraries"].iloc[0])),
                run_ids=[str(x) for x in pd.concat([gdf["run_id"], twins["run_id"]])],
                intervals=pd.DataFrame(iv),
            )
        )
    return sorted(out, key=lambda c: (c.title, c.machine, c.libraries))


OVERSUB = "oversubscribed"


def _flag_oversubscribed(sections: dict[str, pd.DataFrame], gdf: pd.DataFrame) -> None:
    """Add an `oversubscribed` column to every table of a group that has such a run."""
    over = gdf[gdf["oversubscribed"].astype(bool)]
    if over.empty:
        return
    marks = {(e, int(w)): "YES" for e, w in over[["engine", "workers"]].values}
    for df in sections.values():
        if df.empty or "engine" not in df or "workers" not in df:
            continue
        df[OVERSUB] = [marks.get((e, int(w)), "no") for e, w in df[["engine", "workers"]].values]


_FORMATS = {
    "samples/s": "{:,.0f}",
    "efficiency": "{:.2f}",
    "accuracy": "{:.2%}",
    "acc. sd": "{:.2%}",
    "rank min/s": "{:,.0f}",
    "rank median/s": "{:,.0f}",
    "rank max/s": "{:,.0f}",
    "step p50 ms": "{:.2f}",
    "GFLOP/s": "{:.2f}",
    "step p95 ms": "{:.2f}",
    "input ms": "{:.2f}",
    "peak RSS MB": "{:,.0f}",
    "CPU util": "{:.2f}",
    "vs fastest": "{:.2f}",
}


def formatted(df: pd.DataFrame) -> pd.DataFrame:
    """Numbers as display strings; missing values as '-'."""
    shown = df.copy()
    for col in shown.columns:
        fmt = _FORMATS.get(col) or ("{:.2f}" if col.startswith("time to") else None)
        if fmt:
            shown[col] = shown[col].map(lambda v, f=fmt: "-" if pd.isna(v) else f.format(v))
    return shown.fillna("-")


def render_text(comp: Comparison) -> str:
    """One comparison as plain text: title, machine, every table, then the notes."""
    lines = [
        comp.title,
        f"machine: {comp.machine} | {comp.libraries} (comparison {comp.group})",
    ]
    for name, section in comp.sections.items():
        if section.empty:
            continue
        lines += ["", f"  {name}:", formatted(section).to_string(index=False)]
    lines += [""] + [f"  {n}" for n in comp.notes]
    return "\n".join(lines)


# --- numbers for json and csv ---------------------------------------------------------

# The tables' display-only interval columns, and the metric (in `intervals`) each shows.
_INTERVAL_COLUMNS = {
    ("throughput", "95% CI"): "samples/s",
    ("throughput", "eff. 95% CI"): "efficiency",
    ("head to head", "95% CI"): "vs fastest",
}
_KEYS = ("engine", "workers")


def _plain(value: Any) -> Any:
    """A cell as data: numbers as numbers, missing (NaN, None, the tables' '-') as None."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or value == "-" or (isinstance(value, float) and math.isnan(value)):
        return None
    return value


def numeric_rows(comp: Comparison, section: str) -> list[dict[str, Any]]:
    """One table of `comp` with numbers kept as numbers, for json and csv.

    Each interval becomes `METRIC low`, `METRIC high` and `METRIC n` beside the
    metric's value (the display column '95% CI' is dropped; comm % is a share
    0..1 with its interval); missing values are None, never '-'.
    """
    df = comp.sections[section]
    iv = comp.intervals
    lookup: dict[tuple[str, int, str], dict[str, Any]] = {}
    if not iv.empty:
        for row in iv.to_dict("records"):
            lookup[str(row["engine"]), int(row["workers"]), str(row["metric"])] = row
    shown = {col: m for (sec, col), m in _INTERVAL_COLUMNS.items() if sec == section}
    out = []
    for row in df.to_dict("records"):
        item: dict[str, Any] = {}
        for col, value in row.items():
            if col in shown:
                continue
            found = (
                lookup.get((str(row["engine"]), int(row["workers"]), str(col)))
                if all(k in row for k in _KEYS) and col not in _KEYS
                else None
            )
            if found is None:
                item[col] = _plain(value)
                continue
            item[col] = _plain(found["value"])
            for end in ("low", "high", "n"):
                item[f"{col} {end}"] = _plain(found[end])
        out.append(item)
    return out


def long_table(comps: Iterable[Comparison]) -> pd.DataFrame:
    """Every table of every comparison as one long table (csv): one row per
    (comparison, section, engine, workers, metric) with numeric value, low, high and n,
    or `text` for a non-numeric cell (a verdict, 'k/n' counts); missing cells empty."""
    rows = []
    for comp in comps:
        for section in comp.sections:
            for item in numeric_rows(comp, section):
                for col, value in item.items():
                    if col in _KEYS or col.endswith((" low", " high", " n")):
                        continue
                    number = isinstance(value, (int, float)) and not isinstance(value, bool)
                    rows.append(
                        {
                            "comparison": comp.title,
                            "group": comp.group,
                            "machine": comp.machine,
                            "section": section,
                            "engine": item.get("engine"),
                            "workers": item.get("workers"),
                            "metric": col,
                            "value": value if number else None,
                            "low": item.get(f"{col} low"),
                            "high": item.get(f"{col} high"),
                            "n": item.get(f"{col} n"),
                            "text": None if number or value is None else str(value),
                        }
                    )
    columns = ["comparison", "group", "machine", "section", "engine", "workers", "metric"]
    columns += ["value", "low", "high", "n", "text"]
    table = pd.DataFrame(rows, columns=columns)
    for col in ("workers", "n"):
        table[col] = table[col].astype("Int64")
    return table
