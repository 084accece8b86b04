"""`bench compare BASE NEW`: per-cell changes between two result sets, and regression checks.

Cells are matched by (spec minus seed, machine, engine with its options, workers):
library versions and code may differ between BASE and NEW (that is what is being
checked), the hardware may not. A
change is *significant* when the 95% interval of the ratio of medians NEW / BASE
(Welch's t on log values, `stats.ratio`, the interval compare's ratios use)
excludes 1 **and** the change is at least the minimum effect size: with the 3-5
repeats a sweep affords, rank tests cannot reach significance at all
(Mann-Whitney's smallest two-sided p with 3 vs 3 is 0.1), and the effect-size
floor guards against calling timing noise a change. Under 3 runs on either side
there is no interval, so no change is called significant.
A `--fail METRIC:PCT%` check fails when a metric got significantly *worse* by
more than PCT, where worse respects each metric's direction.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from bench.core.errors import CheckError
from bench.measure import stats
from bench.records import LoadedRecord
from bench.tables.frame import frame, usable

# metric -> (record column in report.frame, higher is better)
METRICS: dict[str, tuple[str, bool]] = {
    "throughput": ("throughput", True),
    "accuracy": ("final_accuracy", True),
    "step_p50": ("step_p50_ms", False),
    "peak_rss": ("peak_rss_mb", False),
}
# metric -> (table heading, number format): the units and formats of `bench compare`'s tables
SHOWN: dict[str, tuple[str, str]] = {
    "throughput": ("samples/s", "{:,.0f}"),
    "accuracy": ("accuracy", "{:.2%}"),
    "step_p50": ("step p50 ms", "{:,.2f}"),
    "peak_rss": ("peak RSS MB", "{:,.0f}"),
}
DEFAULT_MIN_EFFECT = 0.03


@dataclasses.dataclass(frozen=True)
class RegressionCheck:
    """One `--fail metric:N%` threshold; `fails(row)` returns a message or None."""

    metric: str
    limit: float  # fraction, e.g. 0.05

    @classmethod
    def parse(cls, text: str) -> RegressionCheck:
        m = re.fullmatch(r"\s*([a-z_0-9]+)\s*:\s*([0-9]+(?:\.[0-9]+)?)\s*%\s*", text)
        if not m:
            raise CheckError(f"--fail expects METRIC:N% (e.g. throughput:5%), got {text!r}")
        metric, pct = m.group(1), float(m.group(2))
        if metric not in METRICS:
            raise CheckError(
                f"--fail metric {metric!r} unknown; choose one of: {', '.join(METRICS)}"
            )
        return cls(metric, pct / 100)

    def fails(self, row: dict[str, Any]) -> str | None:
        change = row.get(f"{self.metric} change")
        if change is None or pd.isna(change) or not row.get(f"{self.metric} significant"):
            return None
        higher_better = METRICS[self.metric][1]
        worse_by = -change if higher_better else change
        if worse_by > self.limit:
            return (
                f"{row['comparison']} {row['engine']} np={row['workers']}: {self.metric} "
                f"{change:+.1%} (significant; limit {self.limit:.0%})"
            )
        return None


def _frame(recs: Sequence[LoadedRecord]) -> pd.DataFrame:
    df = frame(recs)
    if df.empty:
        return df
    df = usable(df).copy()
    df["step_p50_ms"] = 1e3 * df["step_p50"]
    return df


def diff(
    base: Sequence[LoadedRecord],
    new: Sequence[LoadedRecord],
    min_effect: float = DEFAULT_MIN_EFFECT,
) -> pd.DataFrame:
    """One row per cell present in both sets: medians, relative change, significance."""
    b, n = _frame(base), _frame(new)
    if b.empty or n.empty:
        return pd.DataFrame()
    rows = []
    keys = ["spec_group", "machine", "engine", "workers"]
    for key, bcell in b.groupby(keys):
        ncell = n[
            (n["spec_group"] == key[0])
            & (n["machine"] == key[1])
            & (n["engine"] == key[2])
            & (n["workers"] == key[3])
        ]
        if ncell.empty:
            continue
        row: dict[str, Any] = {
            "comparison": f"{bcell['model'].iloc[0]}/{bcell['dataset'].iloc[0]} ({key[0]})",
            "machine": key[1],
            "engine": key[2],
            "workers": int(key[3]),
            "runs": f"{len(bcell)}/{len(ncell)}",
            "oversubscribed": bool(bcell["oversubscribed"].any() or ncell["oversubscribed"].any()),
        }
        for metric, (col, _) in METRICS.items():
            bv, nv = bcell[col].dropna().astype(float), ncell[col].dropna().astype(float)
            if bv.empty or nv.empty or float(np.median(bv)) == 0:
                continue
            est = stats.ratio(nv.tolist(), bv.tolist())
            change = est.value - 1
            sig = (
                est.low is not None
                and est.high is not None
                and (est.low > 1 or est.high < 1)
                and abs(change) >= min_effect
            )
            row[f"{metric} base"] = float(np.median(bv))
            row[f"{metric} new"] = float(np.median(nv))
            row[f"{metric} change"] = change
            # NEW/BASE with its 95% interval (None with fewer than 3 runs a side)
            row[f"{metric} ratio low"], row[f"{metric} ratio high"] = est.low, est.high
            row[f"{metric} significant"] = bool(sig)
        rows.append(row)
    return pd.DataFrame(rows)


def why_unmatched(base: Sequence[LoadedRecord], new: Sequence[LoadedRecord]) -> str:
    """When no cell matched: '; ...' naming the machines if the specs matched on different
    ones, or the measurement protocols if they were timed differently."""
    b, n = _frame(base), _frame(new)
    if b.empty or n.empty:
        return ""
    shared = set(b["spec_group"]) & set(n["spec_group"])
    if not shared:
        apart = protocols_apart(base, new)
        return f"; {apart}" if apart else ""
    return (
        "; the same specs ran on different machines ("
        + ", ".join(sorted(set(b["machine"])))
        + " vs "
        + ", ".join(sorted(set(n["machine"])))
        + "), which are not compared: rerun BASE or NEW on one machine"
    )


def protocols_apart(base: Sequence[LoadedRecord], new: Sequence[LoadedRecord]) -> str | None:
    """Why cells of the same spec in BASE and NEW were not paired: they were timed under
    different measurement protocols (bench/measure/window.py), which are never compared."""
    b, n = _frame(base), _frame(new)
    if b.empty or n.empty:
        return None
    paired = set(b["spec_group"]) & set(n["spec_group"])
    apart = (set(b["spec_any_protocol"]) & set(n["spec_any_protocol"])) - set(
        b[b["spec_group"].isin(paired)]["spec_any_protocol"]
    )
    if not apart:
        return None
    bp = sorted({int(v) for v in b[b["spec_any_protocol"].isin(apart)]["protocol"]})
    np_ = sorted({int(v) for v in n[n["spec_any_protocol"].isin(apart)]["protocol"]})
    return (
        f"{len(apart)} spec(s) ran in both sets but were timed under measurement protocol "
        f"{', '.join(map(str, bp))} in BASE and {', '.join(map(str, np_))} in NEW; timings of "
        "different protocols are never compared: rerun BASE with this version of bench"
    )


def verdict_line(df: pd.DataFrame) -> str:
    """asv's closing line, first: whether any cell changed significantly, and how (a
    significant change of a metric, better or worse by its direction)."""
    better: list[str] = []
    worse: list[str] = []
    for row in df.to_dict("records"):
        for metric, (_, higher_better) in METRICS.items():
            change = row.get(f"{metric} change")
            if not row.get(f"{metric} significant") or change is None or pd.isna(change):
                continue
            name = f"{row['engine']} x{row['workers']} {SHOWN[metric][0]} {change:+.1%}"
            (better if (change > 0) == higher_better else worse).append(name)
    if not better and not worse:
        return f"NOT SIGNIFICANTLY CHANGED: {len(df)} cells compared, no change significant"
    parts = [
        f"worse: {', '.join(worse)}" if worse else "",
        f"better: {', '.join(better)}" if better else "",
    ]
    return "CHANGED SIGNIFICANTLY: " + "; ".join(p for p in parts if p)
