"""Engine knobs for people: the settings that differ between engines, as a short table.

Every record keeps its engine's knobs in full (bucket and fusion sizes, buffer
broadcasts, compression, the fp32 maths...), and so do `bench compare`'s json
and csv. The text report shows only what differs between the engines or runs of
one comparison, one setting per line, so that a reader sees at a glance which
defaults were not equal. Values are in human units (bytes as MB, null as
`default`, an empty list as `none`); a value too long for a cell is never cut:
the cell names a numbered note under the table, which holds it whole.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

# Longest value shown in a cell; a longer one goes whole into a note under the table.
CELL_WIDTH = 22
MB = 2**20  # as --bucket-mb counts


def human(key: str, value: Any) -> str:
    """One knob's value as a reader wants it: 26214400 bytes as '25 MB', null as
    'default', [] as 'none', booleans as yes/no; anything else as JSON or text."""
    if value is None:
        return "default"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list) and not value:
        return "none"
    if key.endswith("_bytes") and isinstance(value, (int, float)):
        return f"{value / MB:g} MB" if value >= MB / 10 else f"{value / 1024:g} KB"
    return value if isinstance(value, str) else json.dumps(value)


def flatten(knobs: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested knobs as `a.b` -> value text in human units (`human`)."""
    out: dict[str, str] = {}
    for key, value in knobs.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, name + "."))
        else:
            out[name] = human(key, value)
    return out


def differing(per_engine: Mapping[str, Sequence[Mapping[str, Any]]]) -> tuple[pd.DataFrame, int]:
    """(setting x engine table of the knobs that differ, how many more are identical), from
    every distinct knob set of each engine (`Comparison.knobs`)."""
    merged: dict[str, dict[str, set[str]]] = {}
    for engine, sets in per_engine.items():
        values: dict[str, set[str]] = {}
        for knobs in sets:
            for key, value in flatten(knobs).items():
                values.setdefault(key, set()).add(value)
        merged[str(engine)] = values
    keys = sorted({k for values in merged.values() for k in values})
    differ = [k for k in keys if _differs(k, merged)]
    engines = sorted(merged)
    rows = [
        [k, *(" | ".join(sorted(merged[e].get(k, set()))) or "-" for e in engines)] for k in differ
    ]
    return pd.DataFrame(rows, columns=["setting", *engines]), len(keys) - len(differ)


def _differs(key: str, merged: Mapping[str, Mapping[str, set[str]]]) -> bool:
    """Whether engines disagree on `key`, or one engine's runs do."""
    seen = [frozenset(values.get(key, set())) for values in merged.values()]
    return len(set(seen)) > 1 or any(len(s) > 1 for s in seen)


def per_engine(ok: pd.DataFrame) -> dict[str, list[dict[str, Any]]]:
    """Each engine's distinct knob sets, from the frame's `knobs` column (JSON)."""
    return {
        str(engine): [json.loads(text) for text in knobs.unique()]
        for engine, knobs in ok.groupby("engine")["knobs"]
    }


def table(ok: pd.DataFrame) -> list[str]:
    """Lines of the table of settings that differ, then a note per value too long for it."""
    sets = per_engine(ok)
    if not sets:
        return []
    df, same = differing(sets)
    if df.empty:
        return [f"knobs: all {same} settings identical across engines (full list: --format json)"]
    notes: list[str] = []
    for col in df.columns[1:]:
        df[col] = [
            _cell(v, f"{s}, {col}", notes) for s, v in zip(df["setting"], df[col], strict=True)
        ]
    head = f"knobs that differ between engines ({same} more identical; all of them: --format json):"
    return [head, *df.to_string(index=False, justify="left").splitlines(), *notes]


def _cell(value: str, where: str, notes: list[str]) -> str:
    """`value`, or a note's number when it is too long for a cell (the note holds it whole)."""
    if len(value) <= CELL_WIDTH:
        return value
    notes.append(f"  [k{len(notes) + 1}] {where}: {value}")
    return f"see [k{len(notes)}]"
