"""Comparison tables: per spec (seed aside), machine, libraries and protocol, one set of
tables over engines and worker counts, with intervals over runs and notes on parity.

Compute-only twins (spec `grad_sync=false`) are not shown as tables of their
own; they give the communication share of their synchronised group.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bench.decide.pairs import DEFAULT_PRECISION
from bench.decide.rule import DIFFERENT, EQUIVALENT
from bench.measure import stats
from bench.measure.contention import STEAL_LIMIT
from bench.records import LoadedRecord, Status
from bench.tables import breakdown, decided, derived, noise, startup, tuning
from bench.tables import knobs as knob_table
from bench.tables.frame import DEFAULT_TARGET, frame, libraries_text, usable

# Accuracy parity: an engine is flagged when its mean accuracy differs from the
# other engines' by more than this many seed-to-seed standard deviations (and by
# at least PARITY_FLOOR, so that near-identical runs with sd ~ 0 are not flagged).
PARITY_SDS = 2.0
PARITY_FLOOR = 0.005
_NOT_FAILED = (Status.OK, Status.UNAVAILABLE)


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
    # (a share, 0..1), vs fastest, total s (start-up).
    intervals: pd.DataFrame = dataclasses.field(default_factory=pd.DataFrame)
    # every engine's knobs in full, each distinct set once; the notes hold `knob_table`,
    # the lines of a table of the settings that differ
    knobs: dict[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)
    knob_table: list[str] = dataclasses.field(default_factory=list)
    # every pair's one reading (the summary's sentences), the spec its runs share (seed
    # aside) and the results folders they came from (the commands that settle a pair)
    readings: decided.Readings | None = None
    spec: dict[str, Any] = dataclasses.field(default_factory=dict)
    folders: list[str] = dataclasses.field(default_factory=list)

    @property
    def frame(self) -> pd.DataFrame:
        return self.sections["throughput"]


def _interval(est: stats.Estimate, spec: str) -> str:
    """'[low, high] n=N', or 'too few runs (n=N)': every interval shows its run count."""
    return est.interval(spec)


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


def _contended_runs(cell: pd.DataFrame) -> str:
    """'k/n' runs of a cell measured on shared CPUs (other processes or steal); '-' for none."""
    k = int(cell["contended"].sum()) if "contended" in cell else 0
    return f"{k}/{len(cell)}" if k else "-"


def _throughput_rows(
    gdf: pd.DataFrame, twins: pd.DataFrame, iv: list[dict[str, Any]], readings: decided.Readings
) -> pd.DataFrame:
    ok = usable(gdf)
    rows = []
    for (engine, workers), cell in gdf.groupby(["engine", "workers"]):
        good = usable(cell)
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
            "contended": _contended_runs(good),
        }
        if len(good):
            tp = good["throughput"].tolist()
            est = stats.estimate(tp)
            row["samples/s"], row["95% CI"] = est.value, _interval(est, ",.0f")
            _keep(iv, engine, workers, "samples/s", est)
            # multi-node variants scale from the same engine's one worker
            single = cell["single_node_engine"].iloc[0]
            base = ok[(ok["engine"] == single) & (ok["workers"] == 1)]["throughput"].tolist()
            reading = readings.efficiency(str(engine), int(workers))
            # the pair's one reading; a 1-worker cell against itself: its own spread
            eff = reading.estimate if reading else (stats.ratio(tp, base) if base else None)
            if eff is not None and (reading or workers == 1):
                row["efficiency"], row["eff. 95% CI"] = eff.value, _interval(eff, ".2f")
                _keep(iv, engine, workers, "efficiency", eff)
            nosync = usable(
                twins[(twins["engine"] == engine) & (twins["workers"] == workers)], twins=True
            )
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
                    # shown clipped to what a share can be (the numbers keep the interval)
                    low, high = max(0.0, 1 - ratio.high), min(1.0, 1 - ratio.low)
                    share += f" [{low:.0%}, {high:.0%}] n={ratio.n}"
                else:
                    share += f" {stats.TOO_FEW} (n={ratio.n})"
                row["comm %"] = share
        rows.append(row)
    return pd.DataFrame(rows).sort_values(["workers", "engine"]).reset_index(drop=True)


def _median(values: list[float]) -> float:
    """np.median of a few numbers (a run's ranks), to the last digit, without numpy's
    per-call cost: compare takes one per run."""
    ordered = sorted(float(v) for v in values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _rank_rows(gdf: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (engine, workers), cell in usable(gdf).groupby(["engine", "workers"]):
        # per run: its slowest, median and fastest rank; the table shows medians over runs
        ranks = [(min(r), _median(r), max(r)) for r in cell["rank_throughput"] if r]
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
                "of peak": _utilisation(cell),
                "peak RSS MB": float(cell["peak_rss_mb"].max()),
                "CPU util": float(cell["cpu_util"].mean()),
                "contended": _contended_runs(cell),
            }
        )
    return (
        pd.DataFrame(rows).sort_values(["workers", "engine"]).reset_index(drop=True)
        if rows
        else pd.DataFrame()
    )


REFUSED = "refused: above the measured peak"


def _utilisation(cell: pd.DataFrame) -> str:
    """`derived.utilisation` as a percentage; never above 100%: above means the peak or
    the FLOP count is wrong, so no figure is shown."""
    share = derived.utilisation(cell)
    if not np.isfinite(share):
        return "not measured"
    return REFUSED if share > 1 else f"{share:.1%}"


def _peak_notes(ok: pd.DataFrame) -> list[str]:
    """Where the peak came from, and each cell whose utilisation was refused."""
    if not ok["peak_gflops"].notna().any():  # no run named a peak: nothing to say
        return []
    notes = []
    for (engine, workers), cell in ok.groupby(["engine", "workers"]):
        if _utilisation(cell) == REFUSED:
            achieved = cell["throughput"].median() * cell["train_flops"].iloc[0] / 1e9
            notes.append(
                f"utilisation refused for {engine} np={workers}: {achieved:,.1f} GFLOP/s achieved "
                f"is above the {cell['peak_gflops'].median():,.1f} GFLOP/s its workers' measured "
                "peak allows; the peak (bench peak --remeasure) or the model's FLOP count is wrong"
            )
    notes.append(
        "'of peak': achieved GFLOP/s over what the run's workers reach in a dense matrix "
        "multiply at their threads and precision (bench peak; each record names its entry)"
    )
    return notes


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
    ok = usable(gdf)
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


def _head_to_head_rows(
    gdf: pd.DataFrame, iv: list[dict[str, Any]], readings: decided.Readings
) -> pd.DataFrame:
    """Each engine against the fastest at its worker count over the same kind of link (a
    variant's suffix: @nodes, /rate): the pair's one reading."""
    rows = []
    ok = usable(gdf)
    link = [e[len(s) :] for e, s in zip(ok["engine"], ok["single_node_engine"], strict=True)]
    for (workers, _), same_w in ok.assign(link=link).groupby(["workers", "link"]):
        by_engine = {e: g["throughput"].tolist() for e, g in same_w.groupby("engine")}
        flagged = {e: _contended_runs(g) for e, g in same_w.groupby("engine")}
        best = max(by_engine, key=lambda e: float(np.median(by_engine[e])))
        for engine, tp in sorted(by_engine.items()):
            found = readings.between(str(engine), str(best), int(workers))
            if engine == best or found is None:  # the fastest (found: None)
                est = stats.ratio(tp, by_engine[best])
                verdict = "fastest"
            else:
                est, reading = found
                verdict = _against_fastest(est, reading.decision.outcome, readings.precision)
            _keep(iv, engine, workers, "vs fastest", est)
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


def _folders(sources: pd.Series) -> list[str]:
    """The results folders (or files) of a comparison's records, each file looked at once."""
    files = {str(s).rpartition(":")[0] for s in sources.dropna()}
    return sorted({_results_of(f + ":0") for f in files})


def _results_of(source: str) -> str:
    """What `--results` names for a record read from `source` (FILE:LINE): the folder of
    a runs.jsonl, or the file itself."""
    file = Path(source.rpartition(":")[0])
    return str(file.parent) if file.name == "runs.jsonl" else str(file)


def _against_fastest(est: stats.Estimate, outcome: str, precision: float) -> str:
    """The word of an engine's reading against the fastest (the pair's own outcome)."""
    if est.high is None:
        return stats.TOO_FEW  # fewer than stats.MIN_RUNS on a side: no verdict
    if outcome == DIFFERENT:
        return "slower" if est.value < 1 else "faster"
    if outcome == EQUIVALENT:
        return f"equivalent within {precision:.0%}"
    return "not settled"


def _contention_note(ok: pd.DataFrame) -> str:
    """The warning for runs measured on shared CPUs, by cause: what to do differs."""
    causes = ok.loc[ok["contended"], "contention_cause"]
    others, steal = (int(causes.str.contains(word).sum()) for word in ("other", "steal"))
    unknown = int((causes == "unknown").sum())
    why: list[str] = []
    if others:
        why.append(
            f"{others} while other processes on this machine used the CPUs (rerun them "
            "on a quiet machine)"
        )
    if steal:
        why.append(
            f"{steal} while the hypervisor withheld over {STEAL_LIMIT:.0%} of the CPU time "
            "(steal: other guests on the host, which nothing on this machine shows; "
            "rerun them when the host is quieter, or on a dedicated one)"
        )
    if unknown:
        why.append(f"{unknown} for a reason the record does not keep")
    return (
        f"WARNING: {len(causes)} of {len(ok)} runs were measured on shared CPUs (column "
        f"'contended'): {'; '.join(why)}. Their throughput is understated, and not "
        "equally for every engine"
    )


def _notes(gdf: pd.DataFrame, others: pd.DataFrame) -> list[str]:
    """What a reader must know besides the tables: parity, settings, flagged runs."""
    ok = usable(gdf)
    notes = [*_fingerprint_notes(ok), *_maths_notes(ok), *knob_table.table(ok), *_peak_notes(ok)]
    over = gdf[gdf["oversubscribed"].astype(bool)]
    if not over.empty:
        cells = sorted(
            {
                f"{e} np={w}: {b}"
                for e, w, b in over[["engine", "workers", "cpu_budget_text"]].values
            }
        )
        notes.append(
            "WARNING: oversubscribed (more worker threads than usable CPUs; the timings "
            "measure CPU contention): " + "; ".join(cells)
        )
    absent = gdf[gdf["status"] == Status.UNAVAILABLE]
    for engine, rows in absent.groupby("engine"):
        notes.append(
            f"unavailable: {engine} not installed where it ran, {len(rows)} run(s) recorded "
            f"without launching: {_first_line(rows['error'].iloc[0], 'no reason given')}"
        )
    if not ok.empty and ok["contended"].any():
        notes.append(_contention_note(ok))
    for _, bad in gdf[~gdf["status"].isin(_NOT_FAILED)].iterrows():
        notes.append(
            f"{bad['status']}: {bad['engine']} np={bad['workers']} ({bad['source']}): "
            f"{_first_line(bad['error'], 'no error text')}"
        )
    return notes + _protocol_notes(gdf, others)


def _first_line(text: str | None, default: str) -> str:
    lines = (text or "").strip().splitlines()[:1]
    return lines[0] if lines else default


def _fingerprint_notes(ok: pd.DataFrame) -> list[str]:
    if ok.empty:
        return []
    notes = []
    for column, what, keys in (
        ("init_fp", "initial-weight fingerprints", ["seed"]),
        ("data_fp", "data-order fingerprints", ["workers", "seed"]),
    ):
        for _, g in ok.groupby(keys):
            if g[column].nunique() > 1:
                detail = ", ".join(
                    f"{e}={fp}" for e, fp in g.groupby("engine")[column].first().items()
                )
                notes.append(f"WARNING: {what} differ between engines ({detail}): not comparable")
                break
    if ok["init_fp"].nunique() == 1:
        notes.append(
            f"initial weights identical across engines (fingerprint {ok['init_fp'].iloc[0]})"
        )
    return notes


def _maths_notes(ok: pd.DataFrame) -> list[str]:
    if ok.empty:
        return []
    if ok["math"].nunique() > 1:
        detail = "; ".join(
            f"{e}: {' | '.join(sorted(m.unique()))}" for e, m in ok.groupby("engine")["math"]
        )
        return [f"WARNING: fp32 maths differ between runs ({detail}): not comparable"]
    return [f"fp32 maths identical across engines: {ok['math'].iloc[0]}"]


PROTOCOLS = {
    1: "each step synchronised and timed alone",
    2: "steps timed in windows, one synchronisation each",
}


def _protocol_notes(gdf: pd.DataFrame, others: pd.DataFrame) -> list[str]:
    """Why runs of the same spec, machine and libraries are not in this comparison: they
    were timed under another measurement protocol, and timings of two protocols are
    never compared (bench/measure/window.py PROTOCOL_VERSION)."""
    mine = int(gdf["protocol"].iloc[0])
    apart = others[others["any_protocol"] == gdf["any_protocol"].iloc[0]]
    apart = apart[apart["protocol"] != mine]
    out = []
    for version, rows in apart.groupby("protocol"):
        out.append(
            f"apart: {len(rows)} run(s) of this spec on this machine were timed under "
            f"measurement protocol {version} ({PROTOCOLS.get(int(version), 'unknown')}); "
            f"these under protocol {mine} ({PROTOCOLS.get(mine, 'unknown')}): never compared"
        )
    return out


def compare(
    recs: Iterable[LoadedRecord],
    target: float = DEFAULT_TARGET,
    precision: float = DEFAULT_PRECISION,
    error_rates: bool = False,
    runs: pd.DataFrame | None = None,
) -> list[Comparison]:
    """One comparison per distinct synchronised spec (seed aside), sorted by title;
    `precision` is the P at which head-to-heads are decided (bench/decide/);
    `error_rates` adds each cell's simulated error rates of those decisions. `runs`: the
    frame of `recs` when the caller has it (one frame an invocation), else built here."""
    recs = list(recs)
    df = frame(recs, target) if runs is None else runs
    if df.empty:
        return []
    tuned = tuning.rows(recs)
    out = []
    synced = df[df["grad_sync"].astype(bool)]
    twins_all = df[~df["grad_sync"].astype(bool)]
    for group, gdf in synced.groupby("group", sort=False):
        twins = twins_all[twins_all["group"] == gdf["twin_group"].iloc[0]]
        iv: list[dict[str, Any]] = []
        readings = decided.Readings(usable(gdf), precision)
        sections = _sections(gdf, twins, iv, target, readings, error_rates, tuned)
        _flag_oversubscribed(sections, gdf)
        notes = _notes(gdf, synced)
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
                knobs={
                    str(e): [json.loads(k) for k in sorted(g.unique())]
                    for e, g in usable(gdf).groupby("engine")["knobs"]
                },
                knob_table=knob_table.table(usable(gdf)),
                readings=readings,
                spec=json.loads(gdf["spec"].iloc[0]),
                folders=_folders(gdf["source"]),
            )
        )
    return sorted(out, key=lambda c: (c.title, c.machine, c.libraries))


def _sections(
    gdf: pd.DataFrame,
    twins: pd.DataFrame,
    iv: list[dict[str, Any]],
    target: float,
    readings: decided.Readings,
    error_rates: bool,
    tuned: pd.DataFrame,
) -> dict[str, pd.DataFrame]:
    """The tables of one comparison, in the order a reader gets them; the intervals
    behind the throughput, head-to-head and start-up tables' text go into `iv`."""
    sections = {
        "throughput": _throughput_rows(gdf, twins, iv, readings),
        "per rank": _rank_rows(gdf),
        "accuracy": _accuracy_rows(gdf, target),
        "head to head": _head_to_head_rows(gdf, iv, readings),
        "decided": decided.rows(readings),
        "noise": noise.rows(usable(gdf)),
    }
    if error_rates:
        sections["error rates"] = decided.error_rows(usable(gdf), readings.precision)
    starts = startup.rows(gdf, iv)
    if not starts.empty:  # records before start-up was recorded have none
        sections["start-up"] = starts
    steps = breakdown.rows(usable(gdf), usable(twins, twins=True))
    if not steps.empty:  # records before steps were profiled have none
        sections["where the step goes (ms)"] = steps
        measured = _tuned(tuned, str(gdf["model"].iloc[0]))
        sections["verdict"] = breakdown.verdict_rows(
            usable(gdf), usable(twins, twins=True), measured
        )
    return sections


def _tuned(table: pd.DataFrame, model: str) -> dict[tuple[str, int], str]:
    """What `bench tune` measured per (engine, workers) of `model`, for the verdict's
    advice to quote: the tuned knobs and tuned / default with its interval."""
    if table.empty:
        return {}
    out = {}
    for _, r in table[table["model"] == model].iterrows():
        knobs = r["tuned knobs"] or "its defaults"
        out[(str(r["engine"]), int(r["workers"]))] = (
            f"{knobs} at {r['tuned / default']:.2f} {r['ratio 95% CI']} of its defaults"
        )
    return out


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
    "ratio": "{:.3f}",
    # the noise table (bench/tables/noise.py)
    "windows": "{:.0f}",
    "within": "{:.1%}",
    "between": "{:.1%}",
    "launch CV": "{:.1%}",
    "launch s": "{:.2f}",
    "window s": "{:.3f}",
    "best windows": "{:.0f}",
    "false different": "{:.2%}",
    "false equivalent": "{:.2%}",
    "A/A decided": "{:.1%}",
    **{
        c: "{:.2f}"
        for c in (
            "step ms",
            "compute",
            "optimizer",
            "exposed comm",
            "hidden comm",
            "other",
            "input (outside)",
            "lost ms",
            "largest ms",
            "behind ms",
        )
    },
}


def formatted(df: pd.DataFrame) -> pd.DataFrame:
    """Numbers as display strings; missing values as '-'."""
    shown = df.copy()
    for col in shown.columns:
        fmt = _FORMATS.get(col) or ("{:.2f}" if col.startswith("time to") else None)
        if fmt:
            shown[col] = shown[col].map(lambda v, f=fmt: "-" if pd.isna(v) else f.format(v))
    # object first: filling a float column (a start-up phase no run of a cell had) with
    # a string is deprecated in pandas (Pandas4Warning) and refused by nullable dtypes
    return shown.astype(object).fillna("-")


def displayed(name: str, section: pd.DataFrame) -> pd.DataFrame:
    """A table as a reader gets it (text, markdown, html): numbers formatted, and the
    throughput table with the per-worker figure beside the global one."""
    shown = formatted(section)
    if name == "throughput" and {"samples/s", "workers"} <= set(section.columns):
        per = [
            "-" if pd.isna(v) else f"{v / int(w):,.0f}"
            for v, w in zip(section["samples/s"], section["workers"], strict=True)
        ]
        shown.insert(shown.columns.get_loc("samples/s") + 1, "per worker/s", per)
    return shown
