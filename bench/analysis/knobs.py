"""Engine knobs for people: the settings that differ between engines, as a short table.

Every record keeps its engine's knobs in full (bucket and fusion sizes, buffer
broadcasts, compression, the fp32 maths...), and so do `bench compare`'s json
and csv. The text report shows only what differs between the engines or runs of
one comparison, one setting per line, so that a reader sees at a glance which
defaults were not equal.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pandas as pd

# Longest value shown in a cell; the full value is in the records and json/csv.
CELL_WIDTH = 22


def flatten(knobs: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested knobs as `a.b` -> value text (lists and scalars as JSON)."""
    out: dict[str, str] = {}
    for key, value in knobs.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value if isinstance(value, str) else json.dumps(value)
    return out


def _cell(values: set[str]) -> str:
    text = " | ".join(sorted(values)) if values else "-"
    return text if len(text) <= CELL_WIDTH else text[: CELL_WIDTH - 3] + "..."


def table(ok: pd.DataFrame) -> list[str]:
    """Lines of the table of settings that differ, from the frame's `knobs` column (JSON)."""
    per_engine: dict[str, dict[str, set[str]]] = {}
    for engine, knobs in ok.groupby("engine")["knobs"]:
        merged: dict[str, set[str]] = {}
        for text in knobs.unique():
            for key, value in flatten(json.loads(text)).items():
                merged.setdefault(key, set()).add(value)
        per_engine[str(engine)] = merged
    if not per_engine:
        return []
    keys = sorted({k for knobs in per_engine.values() for k in knobs})
    differ = [k for k in keys if len({frozenset(e.get(k, set())) for e in per_engine.values()}) > 1
              or any(len(e.get(k, set())) > 1 for e in per_engine.values())]  # fmt: skip
    same = len(keys) - len(differ)
    if not differ:
        return [f"knobs: all {same} settings identical across engines (full list: --format json)"]
    engines = sorted(per_engine)
    rows = [[k, *(_cell(per_engine[e].get(k, set())) for e in engines)] for k in differ]
    widths = [
        max(len(r[i]) for r in [["setting", *engines], *rows]) for i in range(len(engines) + 1)
    ]
    line = "  ".join
    out = [
        f"knobs that differ between engines ({same} more identical; all of them: --format json):",
        line(h.ljust(w) for h, w in zip(["setting", *engines], widths, strict=True)).rstrip(),
    ]
    out += [line(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return out
