"""The tables of `bench collectives`: bus bandwidth and latency by message size."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from bench.records import Kind, LoadedRecord
from bench.tables.frame import finished, link_suffix


def _fmt_bytes(n: int) -> str:
    for unit, size in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def tables(recs: Sequence[LoadedRecord]) -> dict[str, pd.DataFrame]:
    """Bus bandwidth (GB/s) and latency (us) by message size, one column per engine and workers.

    With several records per cell the median is shown. Cells over an emulated link are
    named with its rate (`ddp np2 /1gbit`), and a third table gives their bus bandwidth
    as a fraction of that rate: the link limit beside each busbw.
    """
    rows = []
    for r in finished(recs, Kind.COLLECTIVE):
        rate = (r.get("link") or {}).get("rate_bps")
        for res in r.get("results") or []:
            rows.append(
                {
                    "cell": f"{r['engine']} np{r['world_size']}"
                    + (f" {link_suffix(r)}" if rate else ""),
                    "bytes": res["bytes"],
                    "busbw": res["busbw_gbps"],
                    "latency": res["latency_s"] * 1e6,
                    # GB/s of data in bits/s, over the link's bits/s
                    "of_link": res["busbw_gbps"] * 8e9 / rate if rate else np.nan,
                }
            )
    if not rows:
        return {}
    df = pd.DataFrame(rows)
    out = {}
    shown = [("busbw", "bus bandwidth GB/s"), ("latency", "latency us")]
    if df["of_link"].notna().any():
        shown.append(("of_link", LINK_TABLE))
    for value, name in shown:
        if value == "of_link":
            df = df[df["of_link"].notna()]
        t = df.pivot_table(index="bytes", columns="cell", values=value, aggfunc=np.median)
        t.index = pd.Index([_fmt_bytes(int(b)) for b in t.index], name="size")
        t.columns.name = None
        out[name] = t
    return out


LINK_TABLE = "bus bandwidth / emulated link rate (column: its rate)"


def render_text(parts: dict[str, pd.DataFrame]) -> str:
    """The tables of `tables()` as text, with how bus bandwidth is defined."""
    lines = [
        "allreduce, float32. bus bandwidth = size / time x 2(n-1)/n (nccl-tests); "
        "time = median over iterations of the slowest rank"
    ]
    for name, df in parts.items():
        fmt = "{:.3f}" if name.startswith("bus") else "{:,.0f}"
        if name == LINK_TABLE:
            fmt = "{:.0%}"
        shown = df.map(lambda v, f=fmt: "-" if pd.isna(v) else f.format(v))
        lines += ["", f"  {name}:", shown.to_string()]
    return "\n".join(lines)
