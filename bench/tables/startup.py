"""The start-up table: launch to first timed step per engine and worker count, in phases.

Each run's record carries its start-up (runners/protocol/startup.py); a cell shows the
median total over runs with its interval (the suite's rule: runs are the units), and
the median of each phase, so what an engine spends before training is comparable.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from bench.measure import startup, stats
from bench.records import Status

PHASES = tuple(phase for phase, _ in startup.PHASES)


# the interval's metric in a comparison's intervals: json and csv give it as numbers
METRIC = "total s"


def rows(gdf: pd.DataFrame, iv: list[dict[str, Any]] | None = None) -> pd.DataFrame:
    """One row per engine and worker count with start-up records; empty without any.
    Each total's interval also goes into `iv` (a comparison's intervals), so that json
    and csv carry it as value, low, high and n, not as its display text."""
    has = gdf["startup"].map(bool)
    if not has.any():  # records from before start-up was recorded
        return pd.DataFrame()
    ok = gdf[(gdf["status"] == Status.OK) & has]
    out = []
    for (engine, workers), cell in ok.groupby(["engine", "workers"]):
        totals = [s["total_s"] for s in cell["startup"]]
        est = stats.estimate(totals)
        row: dict[str, Any] = {
            "engine": engine,
            "workers": int(workers),
            "from": "/".join(sorted({s["from"] for s in cell["startup"]})),
            METRIC: round(est.value, 2),
            "95% CI": est.interval(".2f"),
        }
        if iv is not None:
            iv.append(
                {"engine": engine, "workers": int(workers), "metric": METRIC}
                | {"value": est.value, "low": est.low, "high": est.high, "n": est.n}
            )
        for phase in PHASES:
            values = [s["phases_s"][phase] for s in cell["startup"] if phase in s["phases_s"]]
            row[phase] = round(float(np.median(values)), 2) if values else np.nan
        out.append(row)
    if not out:
        return pd.DataFrame()
    return pd.DataFrame(out).sort_values(["workers", "engine"]).reset_index(drop=True)
