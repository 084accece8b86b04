"""Cost and energy per cell: what a million samples, and reaching the target accuracy, cost.

`bench compare --price-per-hour P` (per worker, or `--price-per node`) turns each
cell's median throughput into money per million samples, and its median time to the
target accuracy (over the runs that reached it) into money to get there. Energy comes
from the records (bench/measure/energy.py): mean power over the timed span and
joules per sample (power / throughput, assuming the span's power held while
training); "not measured" where no counter was readable, never zero, with the
sources named.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from bench.core.errors import InputError
from bench.measure import energy
from bench.records import LoadedRecord
from bench.tables.frame import DEFAULT_TARGET, frame, usable

NOT_MEASURED = energy.NOT_MEASURED


@dataclasses.dataclass(frozen=True)
class Price:
    per_hour: float  # money per hour of one unit
    per: str = "worker"  # worker | node

    def __post_init__(self) -> None:
        if not (self.per_hour > 0 and np.isfinite(self.per_hour)):
            raise InputError(f"--price-per-hour must be a positive number, got {self.per_hour}")
        if self.per not in ("worker", "node"):
            raise InputError(f"--price-per must be worker or node, got {self.per!r}")

    def per_second(self, workers: int, nodes: int) -> float:
        return self.per_hour / 3600 * (workers if self.per == "worker" else nodes)


def table(
    recs: Iterable[LoadedRecord],
    price: Price | None,
    target: float = DEFAULT_TARGET,
    runs: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per comparison, engine and worker count of finished synchronised runs
    (`runs`: the frame of `recs` when the caller has it)."""
    df = frame(recs, target) if runs is None else runs
    if df.empty:
        return df
    ok = usable(df)
    rows = [
        _row(title, engine, int(w), cell, price, target)
        for (title, engine, w), cell in ok.groupby(["title", "engine", "workers"])
    ]
    return pd.DataFrame(rows)


def _row(
    title: str, engine: str, workers: int, cell: pd.DataFrame, price: Price | None, target: float
) -> dict[str, Any]:
    tput = float(cell["throughput"].median())
    row: dict[str, Any] = {
        "comparison": title,
        "engine": engine,
        "workers": workers,
        "runs": len(cell),
        "samples/s": f"{tput:,.0f}",
    }
    if price is not None:
        per_s = price.per_second(workers, int(cell["nodes"].max()))
        reached = cell["time_to_target"].dropna()
        row["per M samples"] = f"{per_s * 1e6 / tput:,.4f}"
        row[f"to {target:.0%} accuracy"] = (
            f"{per_s * float(reached.median()):,.4f} ({len(reached)}/{len(cell)} reached)"
            if len(reached)
            else f"not reached (0/{len(cell)})"
        )
    watts = [e.get("watts") for e in cell["energy"] if isinstance(e.get("watts"), int | float)]
    if watts:
        w = float(np.median(watts))
        sources = sorted({s for e in cell["energy"] for s in e.get("sources") or []})
        row["power W"] = f"{w:,.1f}"
        row["J/sample"] = f"{w / tput:.4g}"
        row["energy source"] = ", ".join(sources)
    else:  # every row has every column: a missing one would print as nan
        row["power W"] = row["J/sample"] = NOT_MEASURED
        row["energy source"] = "-"
    return row


def measured(runs: pd.DataFrame) -> bool:
    """Whether any run of the frame has energy a counter reported."""
    energies = runs.get("energy", [])
    return any(isinstance((e or {}).get("joules"), int | float) for e in energies)


def render_text(df: pd.DataFrame, price: Price | None) -> str | None:
    """The cost and energy table under its caption; None without rows."""
    if df.empty:
        return None
    what = (
        f"price {price.per_hour:g} per {price.per}-hour" if price is not None else "no price given"
    )
    return (
        f"cost and energy ({what}; median throughput; time to target over the runs that "
        "reached it; power over the timed span):\n" + df.to_string(index=False)
    )
