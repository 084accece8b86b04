"""A self-contained HTML report: the comparison tables and plots, nothing fetched at view time.

This module assembles the page; the figures are plots.py's, drawn into PNGs
embedded as data URIs. Every string that comes from a record is HTML-escaped
(table cells, titles and notes go through html.escape; the collectives' numeric
tables through pandas' to_html), so a model or host name containing markup shows
as text.
"""

from __future__ import annotations

import dataclasses
import html
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from bench import predict
from bench.core import machine
from bench.records import LoadedRecord, Problem
from bench.render import plots, summary, textfit
from bench.tables import busbw, compare, frame, tuning
from bench.tables import knobs as knob_table
from bench.tables.frame import DEFAULT_TARGET

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1em}
td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left}
.num{text-align:right}
th{background:#f3f3f3}
.note{color:#555;font-size:.9em}
.warn{color:#a00}
figure{display:inline-block;margin:.5em}
figcaption{font-size:.85em;color:#555}
details{margin:.3em 0}
summary{cursor:pointer;font-weight:600}
"""


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _table(df: pd.DataFrame) -> str:
    """`df` (display values) as an HTML table aligned as the text report aligns it: a
    column of numbers to the right, any other (names, intervals, prose) to the left."""
    cols = [str(c) for c in df.columns]
    rows = [[str(v) for v in row] for row in df.itertuples(index=False)]
    right = [textfit.numeric([r[i] for r in rows]) for i in range(len(cols))]

    def line(tag: str, values: Sequence[str]) -> str:
        cells = [
            f'<{tag} class="num">{_esc(v)}</{tag}>' if r else f"<{tag}>{_esc(v)}</{tag}>"
            for r, v in zip(right, values, strict=True)
        ]
        return "<tr>" + "".join(cells) + "</tr>"

    body = "".join(line("td", r) for r in rows)
    return f"<table><thead>{line('th', cols)}</thead><tbody>{body}</tbody></table>"


@dataclasses.dataclass
class Report:
    """The page, and the PNG bytes of its figures in page order (written by `--out`)."""

    html: str
    figures: list[bytes]


def _knobs(comp: compare.Comparison) -> list[str]:
    """The knobs that differ between engines, as a table (the text report's, whole)."""
    table, same = knob_table.differing(comp.knobs)
    if table.empty:
        return []
    return [
        f"<h3>knobs that differ between engines ({same} more identical; all: --format json)</h3>",
        _table(table),
    ]


def _header(recs: Sequence[LoadedRecord], problems: Sequence[Problem]) -> str:
    envs = [r["env"] for r in recs if r.get("env")]
    machines = sorted({f"{e.get('hostname', '?')}: {machine.machine_key(e)}" for e in envs})
    libs = sorted({json.dumps(e.get("libraries", {}), sort_keys=True) for e in envs})
    parts = ["<h2>What was compared</h2><ul>"]
    parts.append(f"<li>{len(recs)} records; machines: {_esc('; '.join(machines))}</li>")
    parts.append(f"<li>library versions: {_esc(' | '.join(libs))}</li>")
    if len(libs) > 1 or len(machines) > 1:
        parts.append(
            '<li class="warn">records come from different machines or library versions: '
            "each comparison below holds one of each, named under its title</li>"
        )
    parts.append(f"<li>records skipped: {len(problems)}</li></ul>")
    if problems:
        parts.append(
            "<ul>" + "".join(f'<li class="note">{_esc(p)}</li>' for p in problems) + "</ul>"
        )
    return "".join(parts)


def render(
    recs: Sequence[LoadedRecord],
    problems: Sequence[Problem] = (),
    target: float = DEFAULT_TARGET,
) -> str:
    """The whole report as one HTML string."""
    return build(recs, problems, target).html


def _apart(recs: Sequence[LoadedRecord]) -> list[str]:
    """Model predictions (labelled so, apart from every measured table) and bench tune's
    best against best."""
    out = []
    predicted = predict.table(recs)
    if not predicted.empty:
        out.append("<h2>Model predictions (not measurements)</h2>")
        out.append(f'<p class="warn">{_esc(predict.CAPTION)}</p>')
        out.append(_table(predicted))
    tuned = tuning.rows(recs)
    if not tuned.empty:
        out.append("<h2>Best against best (bench tune: fresh default and tuned runs)</h2>")
        out.append(_table(tuned))
    return out


def build(
    recs: Sequence[LoadedRecord],
    problems: Sequence[Problem] = (),
    target: float = DEFAULT_TARGET,
    runs: pd.DataFrame | None = None,
) -> Report:
    """The whole report, and its figures as PNG bytes in page order (`runs`: the frame of
    `recs` when the caller has it)."""
    figs = plots.Figures()
    if runs is None:  # every comparison's rows: its figures draw from them
        runs = frame.frame(recs, target)
    labels = [str(e) for e in runs.get("engine", pd.Series(dtype=str))]
    parts = busbw.tables(recs)
    for part in parts.values():
        labels += [str(c).partition(" ")[0] for c in part.columns]
    style = plots.Style(labels)
    body = ["<h1>Data-parallel training engines compared</h1>", _header(recs, problems)]
    for comp in compare.compare(recs, target, runs=runs):
        body += _comparison(comp, recs, runs, target, style, figs)
    if parts:
        body.append("<h2>Collectives</h2>")
        for name, df in parts.items():
            body.append(
                f"<h3>{_esc(name)}</h3>" + df.to_html(escape=True, border=0, float_format="%.3f")
            )
        body.append(plots.collective_plot(parts, style, figs))
    body.extend(_apart(recs))
    return Report(_page(body), figs.png)


def _comparison(
    comp: compare.Comparison,
    recs: Sequence[LoadedRecord],
    runs: pd.DataFrame,
    target: float,
    style: plots.Style,
    figs: plots.Figures,
) -> list[str]:
    """One comparison: its title and machine, the summary (the text report's first
    screen), its figures, then every section, the notes, the knobs and the spec, each
    collapsed under its name."""
    spec: Mapping[str, Any] = next((r["spec"] for r in recs if r.get("run_id") in comp.run_ids), {})
    body = [
        f"<h2>{_esc(comp.title)}</h2>",
        f"<p><b>machine:</b> {_esc(comp.machine)} | {_esc(comp.libraries)}</p>",
        _table(summary.table(comp)),
    ]
    for name, found in summary.items(comp):
        kind = "warn" if name == "warnings" else "answer"
        body.append(f"<h3>{_esc(name)}</h3><ul>")
        body += [f'<li class="{kind}">{_esc(item)}</li>' for item in found]
        body.append("</ul>")
    body.extend(plots.plots(comp, recs, runs, target, style, figs))
    for name, df in comp.sections.items():
        if not df.empty:
            body.append(_details(name, _table(compare.displayed(name, df))))
    notes = "".join(
        f'<li class="{"warn" if n.startswith("WARNING") else "note"}">{_esc(n)}</li>'
        for n in comp.notes
        if n not in comp.knob_table or n.startswith("knobs:")
    )
    body.append(_details("notes", f"<ul>{notes}</ul>"))
    knobs = _knobs(comp)
    if knobs:
        body.append(_details("knobs that differ between engines", "".join(knobs[1:])))
    rows = pd.DataFrame({"setting": list(spec), "value": [str(v) for v in spec.values()]})
    body.append(_details("spec", _table(rows)))
    return body


def _details(name: str, content: str) -> str:
    """A section the reader opens on request."""
    return f"<details><summary>{_esc(name)}</summary>{content}</details>"


def _page(body: Sequence[str]) -> str:
    # Lets a headless browser test read back how many plots actually decoded.
    script = (
        "<script>window.addEventListener('load',()=>{const i=[...document.querySelectorAll('img.plot')];"
        "document.body.dataset.plotsLoaded=i.filter(x=>x.complete&&x.naturalWidth>0).length;"
        "document.body.dataset.plots=i.length;});</script>"
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>bench report</title>"
        f"<style>{_STYLE}</style>{script}</head><body>" + "".join(body) + "</body></html>"
    )
