"""From records on disk to comparison tables (pandas).

Records are grouped by their spec minus the seed: one table compares only runs
that were asked to do the same thing. Within a table a row is (engine, workers);
every number in it is computed from the records listed by `bench compare
--sources`, so each can be traced to a line of a results file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from bench import env as benv
from bench import records, stats

# Spec fields that may differ between the runs of one table.
VARYING = ("seed",)


@dataclasses.dataclass
class Table:
    title: str
    group: str
    frame: pd.DataFrame
    notes: list[str]


def _group_key(spec: dict[str, Any]) -> str:
    fixed = {k: v for k, v in spec.items() if k not in VARYING}
    return hashlib.sha256(json.dumps(fixed, sort_keys=True).encode()).hexdigest()[:10]


def _title(spec: dict[str, Any]) -> str:
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


def frame(recs: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """One row per record with the columns the reports use."""
    rows = []
    for r in recs:
        spec = r.get("spec") or {}
        fps = r.get("fingerprints") or {}
        env = r.get("env") or {}
        rows.append(
            {
                "run_id": r.get("run_id"),
                "source": r.get("_source"),
                "status": r.get("status"),
                "engine": r.get("engine"),
                "workers": r.get("world_size"),
                "model": spec.get("model"),
                "dataset": spec.get("dataset"),
                "seed": spec.get("seed"),
                "group": _group_key(spec),
                "title": _title(spec),
                "throughput": r.get("throughput"),
                "final_accuracy": r.get("final_accuracy"),
                "init_fp": fps.get("init_weights"),
                "data_fp": fps.get("data_order"),
                "machine": benv.machine_key(env),
                "libraries": json.dumps(env.get("libraries", {}), sort_keys=True),
                "knobs": json.dumps(r.get("knobs", {}), sort_keys=True),
                "error": r.get("error"),
            }
        )
    return pd.DataFrame(rows)


def _agreement(ok: pd.DataFrame, column: str, what: str, per_workers: bool) -> str | None:
    """A note when engines disagree on a fingerprint that the contract says must match."""
    keys = ["workers"] if per_workers else []
    groups = ok.groupby([*keys, "seed"])
    for _, g in groups:
        values = set(g[column].dropna())
        if len(values) > 1:
            detail = ", ".join(f"{e}={fp}" for e, fp in g.groupby("engine")[column].first().items())
            return f"WARNING: {what} differ between engines ({detail}): the runs are not comparable"
    return None


def compare(recs: list[dict[str, Any]]) -> list[Table]:
    """Comparison tables, one per distinct spec (seed aside), sorted by title."""
    df = frame(recs)
    if df.empty:
        return []
    tables = []
    for group, gdf in df.groupby("group", sort=False):
        ok = gdf[gdf["status"] == records.Status.OK]
        notes = []
        base = {
            eng: ok[(ok["engine"] == eng) & (ok["workers"] == 1)]["throughput"].tolist()
            for eng in gdf["engine"].unique()
        }
        rows = []
        for (engine, workers), cell in gdf.groupby(["engine", "workers"]):
            good = cell[cell["status"] == records.Status.OK]
            row: dict[str, Any] = {
                "engine": engine,
                "workers": int(workers),
                "runs": len(good),
                "failed": len(cell) - len(good),
            }
            if len(good):
                tp = stats.bootstrap(good["throughput"].tolist())
                row["samples/s"] = tp.value
                row["95% CI"] = "-" if tp.low is None else f"[{tp.low:,.0f}, {tp.high:,.0f}]"
                if base.get(engine):
                    eff = stats.bootstrap_ratio(
                        good["throughput"].tolist(), base[engine], float(workers)
                    )
                    row["efficiency"] = eff.value
                    row["eff. 95% CI"] = (
                        "-" if eff.low is None else f"[{eff.low:.2f}, {eff.high:.2f}]"
                    )
                acc = good["final_accuracy"].astype(float)
                row["accuracy"] = float(acc.mean())
                row["acc. sd"] = float(acc.std(ddof=1)) if len(acc) > 1 else np.nan
            rows.append(row)
        table = pd.DataFrame(rows).sort_values(["workers", "engine"]).reset_index(drop=True)
        for col in ("samples/s", "95% CI", "efficiency", "eff. 95% CI", "accuracy", "acc. sd"):
            if col not in table:
                table[col] = np.nan
        if not ok.empty:
            for note in (
                _agreement(ok, "init_fp", "initial-weight fingerprints", per_workers=False),
                _agreement(ok, "data_fp", "data-order fingerprints", per_workers=True),
            ):
                if note:
                    notes.append(note)
            if ok["init_fp"].nunique() == 1:
                notes.append(
                    f"initial weights identical across engines (fingerprint {ok['init_fp'].iloc[0]})"
                )
            if ok["machine"].nunique() > 1:
                notes.append(
                    "WARNING: records from different machines: "
                    + "; ".join(sorted(ok["machine"].unique()))
                )
            if ok["libraries"].nunique() > 1:
                notes.append(
                    "WARNING: records from different library versions: "
                    + " | ".join(sorted(ok["libraries"].unique()))
                )
            knobs = ok.groupby("engine")["knobs"].first()
            notes.append("engine knobs: " + "; ".join(f"{e} {k}" for e, k in knobs.items()))
        for _, bad in gdf[gdf["status"] != records.Status.OK].iterrows():
            first = (bad["error"] or "").strip().splitlines()[:1]
            notes.append(
                f"{bad['status']}: {bad['engine']} np={bad['workers']} ({bad['source']}): {first[0] if first else 'no error text'}"
            )
        tables.append(Table(str(gdf["title"].iloc[0]), str(group), table, notes))
    return sorted(tables, key=lambda t: t.title)


def render_text(table: Table) -> str:
    shown = table.frame.copy()
    shown["samples/s"] = shown["samples/s"].map(lambda v: "-" if pd.isna(v) else f"{v:,.0f}")
    shown["efficiency"] = shown["efficiency"].map(lambda v: "-" if pd.isna(v) else f"{v:.2f}")
    shown["accuracy"] = shown["accuracy"].map(lambda v: "-" if pd.isna(v) else f"{v:.2%}")
    shown["acc. sd"] = shown["acc. sd"].map(lambda v: "-" if pd.isna(v) else f"{v:.2%}")
    shown = shown.fillna("-")
    lines = [table.title, f"(table {table.group})", shown.to_string(index=False)]
    lines += [f"  {n}" for n in table.notes]
    return "\n".join(lines)
