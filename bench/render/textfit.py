"""Tables that fit the reader's terminal.

A table is its key columns (engine, workers) and the rest. Prose columns (evidence,
what to try, how communication was measured) never pad a column: each value goes
under the table as a numbered note, its cell naming the note. A column with the
same value on every row is said once, in a line under the table. What is left is
split into parts that each fit the width, the key columns repeated in every part,
with a line saying so; no value is ever cut. `--wide` (width None) keeps one table.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence

import pandas as pd

from bench.render.choices import width as width  # where the CLI and the tables agree

KEYS = ("engine", "workers", "setting")
# columns of sentences: always notes under the table, never a column
PROSE = ("evidence", "try", "comm measured by", "energy source")
# a value longer than this becomes a note too, whatever its column
LONGEST_CELL = 34
_NUMBER = re.compile(r"^[-+]?[\d,.]+%?$|^-$")


def wrap(text: str, limit: int | None, indent: str = "", hang: str = "    ") -> list[str]:
    """`text` as lines of at most `limit` columns (words never split unless longer)."""
    if limit is None:
        return [indent + text]
    return textwrap.wrap(
        text,
        width=limit,
        initial_indent=indent,
        subsequent_indent=indent + hang,
        break_on_hyphens=False,
    ) or [indent]


def numeric(values: Sequence[str]) -> bool:
    """Whether a column of display strings is numbers (or '-'), to be right-aligned."""
    return all(_NUMBER.match(v) for v in values)


def grid(df: pd.DataFrame) -> list[str]:
    """`df` (display strings) as aligned lines: numbers right, words left."""
    cols = [str(c) for c in df.columns]
    cells = [[str(v) for v in row] for row in df.itertuples(index=False)]
    sizes = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(cols)]
    right = [numeric([r[i] for r in cells]) for i in range(len(cols))]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(n) if r else v.ljust(n) for v, n, r in zip(values, sizes, right, strict=True)
        ]
        return "  ".join(parts).rstrip()

    return [line(cols), *(line(r) for r in cells)]


def _label(row: pd.Series, keys: Sequence[str]) -> str:
    """A row's name in a note: 'ddp x2', its setting, or else its first column's value
    (a table keyed by none of `keys`, as the within-reach one)."""
    have = [k for k in keys if k in row.index]
    if "engine" in have and "workers" in have:
        return f"{row['engine']} x{row['workers']}"
    if {"a", "b", "workers"} <= set(have):  # a pair of the decided table
        return f"{row['a']} / {row['b']} x{row['workers']}"
    return " ".join(str(row[k]) for k in have or [row.index[0]])


def _to_notes(df: pd.DataFrame, keys: Sequence[str], notes: list[str]) -> pd.DataFrame:
    """Prose columns and over-long values replaced by note numbers; the notes appended."""
    df = df.copy()
    for col in [c for c in df.columns if c not in keys]:
        prose = col in PROSE
        for i in df.index:
            value = str(df.at[i, col])
            if value in ("-", "") or not (prose or len(value) > LONGEST_CELL):
                continue
            notes.append(f"[{len(notes) + 1}] {_label(df.loc[i], keys)}, {col}: {value}")
            df.at[i, col] = f"[{len(notes)}]"
    return df


def _constant(df: pd.DataFrame, keys: Sequence[str]) -> tuple[pd.DataFrame, list[str]]:
    """Columns with one value on every row (of several), dropped and said once."""
    if len(df) < 2:
        return df, []
    same = [c for c in df.columns if c not in keys and df[c].astype(str).nunique() == 1]
    if len(same) == len(df.columns) - len([k for k in keys if k in df.columns]):
        return df, []  # keep a table to show
    said = [f"{c} {df[c].iloc[0]}" for c in same]
    return df.drop(columns=same), said


def _parts(df: pd.DataFrame, keys: Sequence[str], limit: int | None) -> list[pd.DataFrame]:
    """`df` split by columns into tables of at most `limit` columns, keys in each."""
    key_cols = [c for c in df.columns if c in keys]
    rest = [c for c in df.columns if c not in keys]
    if limit is None or not rest:
        return [df]
    parts: list[list[str]] = [[]]
    for col in rest:
        trial = df[key_cols + parts[-1] + [col]]
        if parts[-1] and max(len(line) for line in grid(trial)) > limit:
            parts.append([])
        parts[-1].append(col)
    return [df[key_cols + cols] for cols in parts]


def table(
    df: pd.DataFrame, limit: int | None, indent: str = "  ", keys: Sequence[str] = KEYS
) -> list[str]:
    """`df` (display strings) as lines of at most `limit` columns (None: one table)."""
    notes: list[str] = []
    shown = _to_notes(df.astype(str).reset_index(drop=True), keys, notes)
    shown, same = _constant(shown, keys)
    inner = None if limit is None else limit - len(indent)
    parts = _parts(shown, keys, inner)
    lines: list[str] = []
    for n, part in enumerate(parts):
        if n:
            lines.append("")
        lines += [indent + line for line in grid(part)]
    if len(parts) > 1:
        lines += wrap(
            f"(in {len(parts)} parts to fit {limit} columns; --wide or a wider COLUMNS "
            "shows one table)",
            limit,
            indent,
        )
    if same:
        lines += wrap("on every row: " + "; ".join(same), limit, indent)
    for note in notes:
        lines += wrap(note, limit, indent, hang="      ")
    return lines
