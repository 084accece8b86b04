"""Comparisons as a reader gets them: text, Markdown, CSV, JSON (numbers kept as numbers)
or the HTML report, with the model predictions and collective tables shown apart."""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Iterable
from typing import Any

import numpy as np
import pandas as pd

from bench import predict
from bench.decide.pairs import DEFAULT_PRECISION
from bench.records import Loaded
from bench.render import html, summary, textfit
from bench.render.choices import FORMATS as FORMATS
from bench.render.choices import SUFFIX as SUFFIX
from bench.tables import busbw, decided, noise, regress, startup, tuning
from bench.tables import knobs as knob_table
from bench.tables.compare import Comparison, compare, displayed
from bench.tables.frame import frame

# What a header cannot say, printed once under its table.
_KEYS_OF = {
    "throughput": "samples/s: all workers together, median over runs; per worker/s: samples/s "
    "/ workers (Horovod's 'per GPU' figure); comm %: intervals clipped to [0%, 100%]",
    "per rank": "CPU util: cores busy (CPU-seconds per second of the training loop, mean over "
    "ranks); of peak: achieved FLOP/s over the machine's measured matmul peak",
    "start-up": "every phase in seconds, median over runs; from: where the clock starts "
    "(launch: when bench run launched the cell; process start: a runner started by hand)",
    "decided": decided.KEY,
    "noise": noise.KEY,
    "error rates": decided.ERROR_KEY,
    "where the step goes (ms)": "ms per step; '-': not measured for that cell (the note under "
    "'comm measured by' says why)",
}


def render_text(
    comp: Comparison, width: int | None = None, show: Collection[str] | None = None
) -> str:
    """One comparison as plain text, every line at most `width` columns (None: no limit).

    `show` None: its summary (bench/render/summary.py) alone. Otherwise the summary, then
    the sections `show` names (summary.SECTIONS' values; every one for --all), each table
    with its prose as numbered notes under it, then the notes and knobs if named."""
    lines = summary.render(comp, width)
    if not show:
        return "\n".join(lines)
    lines += [""]
    lines += textfit.wrap(
        f"in full: machine {comp.machine} | {comp.libraries} (comparison {comp.group})", width
    )
    for name, section in comp.sections.items():
        if section.empty or name not in show:
            continue
        # a row is an (engine, workers) cell, or in the decided table a pair
        keys = ("workers", "a", "b") if "a" in section else textfit.KEYS
        lines += ["", f"  {name}:", *textfit.table(displayed(name, section), width, keys=keys)]
        if name in _KEYS_OF:
            lines += textfit.wrap(f"key: {_KEYS_OF[name]}", width, "  ")
    if "notes" not in show and "knobs" not in show:
        return "\n".join(lines)
    lines.append("")
    for note in comp.notes if "notes" in show else []:
        if note not in comp.knob_table:
            lines += textfit.wrap(note, width, "  ")
    if "knobs" not in show:
        return "\n".join(lines)
    knobs, same = knob_table.differing(comp.knobs)
    if knobs.empty:  # 'all N settings identical', or nothing recorded
        for line in comp.knob_table:
            lines += textfit.wrap(line, width, "  ")
    else:
        lines += textfit.wrap(
            f"knobs that differ between engines ({same} more identical; all of them: "
            "--format json):",
            width,
            "  ",
        )
        lines += textfit.table(knobs, width, "    ", keys=("setting",))
    return "\n".join(lines)


# --- numbers for json and csv ---------------------------------------------------------

# The tables' display-only interval columns, and the metric (in `intervals`) each shows.
_INTERVAL_COLUMNS = {
    ("throughput", "95% CI"): "samples/s",
    ("throughput", "eff. 95% CI"): "efficiency",
    ("head to head", "95% CI"): "vs fastest",
    ("start-up", "95% CI"): startup.METRIC,
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


def render(
    loaded: Loaded,
    fmt: str,
    target: float,
    figures: list[bytes] | None = None,
    width: int | None = None,
    precision: float = DEFAULT_PRECISION,
    error_rates: bool = False,
    show: Collection[str] | None = None,
    runs: pd.DataFrame | None = None,
) -> str | None:
    """The comparison of `loaded` in one format; None when nothing is comparable.

    For html, the figures' PNG bytes are appended to `figures` when it is given. Text
    fits `width` columns (None: no limit, one table each); text and markdown give each
    comparison's summary, then the sections `show` names (json and csv: every figure).
    `runs`: the frame of the records, when the caller read them as one (frame.read).
    """
    if runs is None:  # one frame for every section and format of this invocation
        runs = frame(loaded.records, target)
    comps = compare(loaded.records, target, precision, error_rates, runs)
    coll = busbw.tables(loaded.records)
    predicted = predict.render_text(loaded.records)  # model figures, shown apart
    tuned = tuning.rows(loaded.records)  # bench tune's fresh default and tuned runs
    if not comps and not coll and not predicted and tuned.empty:
        return None
    if fmt == "html":
        page = html.build(loaded.records, loaded.problems, target, runs)
        if figures is not None:
            figures.extend(page.figures)
        return page.html
    if fmt == "json":
        return _json(comps)
    if fmt == "csv":  # one long table, numbers as numbers (pandas.read_csv reads it)
        return long_table(comps).to_csv(index=False)
    if fmt == "markdown":
        return _markdown(comps, loaded, show)
    out = [render_text(c, width, show) + "\n" for c in comps]
    if coll:
        out.append(collectives_text(coll, width) + "\n")
    if predicted:
        out.append(predicted + "\n")
    if not tuned.empty:
        title = "\n".join(textfit.wrap(TUNED_TITLE + ":", width))
        out.append(f"{title}\n{tuning_text(tuned, width)}\n")
    return "\n".join(out)


def collectives_text(parts: dict[str, pd.DataFrame], width: int | None) -> str:
    """`bench.tables.busbw`'s tables in at most `width` columns (its own text, fitted):
    the size repeated in every part of a table split to fit."""
    if width is None:
        return busbw.render_text(parts)
    lines: list[str] = []
    for text in busbw.render_text({}).splitlines():
        lines += textfit.wrap(text, width)
    for name, df in parts.items():
        # the formats of busbw.render_text
        fmt = "{:.0%}" if name == busbw.LINK_TABLE else "{:,.0f}"
        fmt = "{:.3f}" if name.startswith("bus") else fmt
        shown = df.map(lambda v, f=fmt: "-" if pd.isna(v) else f.format(v)).reset_index()
        shown.columns = [str(c) for c in shown.columns]
        lines += ["", f"  {name}:", *textfit.table(shown, width, keys=("size",))]
    return "\n".join(lines)


TUNED_TITLE = "best against best (bench tune: fresh runs of each engine's default and tuned knobs)"


def _json(comps: list[Comparison]) -> str:
    data = [
        {
            "title": c.title,
            "group": c.group,
            "machine": c.machine,
            "libraries": c.libraries,
            "answers": summary.answers_data(c),
            "sections": {n: numeric_rows(c, n) for n in c.sections},
            "notes": [n for n in c.notes if n not in c.knob_table],
            "knobs": c.knobs,
        }
        for c in comps
    ]
    return json.dumps(data, indent=1)


def _markdown(comps: list[Comparison], loaded: Loaded, show: Collection[str] | None) -> str:
    out = []
    for c in comps:
        out.append(f"### {c.title}\n\nmachine: {c.machine} | {c.libraries}\n")
        out.append(summary.markdown(c))
        for name, df in c.sections.items():
            if not df.empty and show and name in show:
                out.append(f"**{name}**\n\n{displayed(name, df).to_markdown(index=False)}\n")
        if show and "notes" in show:
            out.append("\n".join(f"- {n}" for n in c.notes if n not in c.knob_table) + "\n")
        if c.knob_table and show and "knobs" in show:
            out.append("```\n" + "\n".join(c.knob_table) + "\n```\n")
    tuned = tuning.rows(loaded.records)
    if not tuned.empty:
        out.append(f"### {TUNED_TITLE}\n\n{tuned.to_markdown(index=False)}\n")
    if predict.render_text(loaded.records):
        table = predict.table(loaded.records).to_markdown(index=False)
        out.append(f"### Model predictions (not measurements)\n\n{predict.CAPTION}\n\n{table}\n")
    return "\n".join(out)


# -- bench compare --base/--new and bench tune, as text --------------------------------


REGRESS_LEGEND = (
    "* significant: the 95% interval of NEW/BASE (Welch t on logs, >= 3 runs a side)"
    " excludes 1 and |change| >= minimum effect"
)


def regress_text(df: pd.DataFrame, markdown: bool = False, width: int | None = None) -> str:
    """The diff as a compact table (Markdown for a pull-request comment). Text fits `width`
    (None: one line per row) as compare's tables do: one table per comparison under its
    name, split into parts with engine and workers repeated, values said once when every
    row shares them."""
    shown = _regress_shown(df)
    first = regress.verdict_line(df)
    if markdown:
        return f"**{first}**\n\n" + shown.to_markdown(index=False) + "\n\n" + REGRESS_LEGEND
    lines: list[str] = textfit.wrap(first, width)
    for title, rows in shown.groupby("comparison", sort=False):
        if lines:
            lines.append("")
        lines += textfit.wrap(str(title), width)
        lines += textfit.table(rows.drop(columns=["comparison"]), width, "  ")
    return "\n".join([*lines, "", *textfit.wrap(REGRESS_LEGEND, width)])


def _regress_shown(df: pd.DataFrame) -> pd.DataFrame:
    """The diff's rows as display strings: BASE -> NEW (change), * when significant."""
    shown = pd.DataFrame(
        {
            "comparison": df["comparison"],
            "machine": df["machine"],
            "engine": df["engine"],
            "workers": df["workers"],
            "runs base/new": df["runs"],
        }
    )
    if df["oversubscribed"].any():
        shown["oversubscribed"] = ["YES" if o else "no" for o in df["oversubscribed"]]
    for metric in regress.METRICS:
        if f"{metric} change" not in df:
            continue
        heading, fmt = regress.SHOWN[metric]
        shown[heading] = [
            "-"
            if pd.isna(c)
            else f"{fmt.format(b)} -> {fmt.format(n)} ({c:+.1%}){' *' if s else ''}"
            for b, n, c, s in zip(
                df[f"{metric} base"],
                df[f"{metric} new"],
                df[f"{metric} change"],
                df[f"{metric} significant"].fillna(False),
                strict=True,
            )
        ]
    return shown


def tuning_readable(table: pd.DataFrame) -> pd.DataFrame:
    """The rows as a reader wants them: samples/s with thousands separators beside their
    interval, the tuned knobs or 'its defaults won', no session id (`--format json` has it)."""
    out = []
    for r in table.to_dict("records"):
        same = not r["tuned knobs"] or r["tuned knobs"] == r["default knobs"]
        out.append(
            {
                "engine": r["engine"],
                "workers": r["workers"],
                "model": r["model"],
                "default samples/s": f"{r['default samples/s']:,} {r['default 95% CI']}",
                "tuned samples/s": f"{r['tuned samples/s']:,} {r['tuned 95% CI']}",
                "tuned knobs": "its defaults won" if same else r["tuned knobs"],
                "tuned / default": f"{r['tuned / default']:.3f} {r['ratio 95% CI']}",
                "trials": r["trials"],
            }
        )
    return pd.DataFrame(out)


def tuning_text(table: pd.DataFrame, width: int | None = None) -> str:
    """The best-against-best table in at most `width` columns (None: no limit)."""
    if table.empty:
        return "  (no fresh default and tuned runs recorded)"
    return "\n".join(textfit.table(tuning_readable(table), width))
