"""A self-contained HTML report: the comparison tables and plots, nothing fetched at view time.

Plots are drawn with matplotlib (Agg) into PNGs embedded as data URIs; every
plotted number comes from the records passed in. Every string that comes from a
record is HTML-escaped (pandas' to_html escapes cells; titles and notes go
through html.escape), so a model or host name containing markup shows as text.
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from bench import collectives, records, report

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1em}
td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}
th{background:#f3f3f3}
.note{color:#555;font-size:.9em}
.warn{color:#a00}
figure{display:inline-block;margin:.5em}
figcaption{font-size:.85em;color:#555}
"""


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


# PNG bytes of every figure drawn by the last render(), in page order (for --out).
FIGURES: list[bytes] = []


def _png(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    FIGURES.append(buf.getvalue())
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _figure(src: str, caption: str) -> str:
    return f'<figure><img class="plot" src="{src}" alt="{_esc(caption)}"><figcaption>{_esc(caption)}</figcaption></figure>'


def _plots(comp: report.Comparison, recs: list[dict[str, Any]]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    tp = comp.sections["throughput"].dropna(subset=["samples/s"])
    if not tp.empty:
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
        for engine, g in tp.groupby("engine"):
            g = g.sort_values("workers")
            line = ax1.plot(g["workers"], g["samples/s"], marker="o", label=str(engine))[0]
            one = g[g["workers"] == 1]["samples/s"]
            if not one.empty:
                ax1.plot(
                    g["workers"],
                    one.iloc[0] * g["workers"],
                    ls=":",
                    color=line.get_color(),
                    label=f"{engine} ideal",
                )
            ax2.plot(g["workers"], g["efficiency"], marker="o", label=str(engine))
        ax1.set(xlabel="workers", ylabel="samples/s (median)", title="throughput vs workers")
        ax2.axhline(1.0, ls=":", color="grey")
        ax2.set(xlabel="workers", ylabel="efficiency", title="scaling efficiency", ylim=(0, None))
        for ax in (ax1, ax2):
            ax.legend(fontsize=7)
            ax.set_xticks(sorted(tp["workers"].unique()))
        out.append(
            _figure(_png(fig), "throughput with the ideal linear line, and scaling efficiency")
        )

    ok = [
        r
        for r in recs
        if r.get("status") == records.Status.OK
        and r.get("kind", "train") == "train"
        and r.get("run_id") in comp.run_ids
        and (r.get("spec") or {}).get("grad_sync", True)
    ]
    if ok:
        # One run per (engine, workers): the lowest seed, so curves are comparable.
        first: dict[tuple[str, int], dict[str, Any]] = {}
        for r in sorted(ok, key=lambda r: r["spec"].get("seed", 0)):
            first.setdefault((r["engine"], r["world_size"]), r)
        fig, axes = plt.subplots(1, 3, figsize=(14, 3.6))
        for (engine, workers), r in sorted(first.items()):
            label = f"{engine} np={workers}"
            axes[0].plot(r.get("step_losses") or [], lw=0.8, label=label)
            ep = r.get("epochs") or []
            wall = np.cumsum([e.get("train_time_s") or 0 for e in ep])
            axes[1].plot(wall, [e.get("train_loss") for e in ep], marker=".", label=label)
            axes[2].plot(wall, [e.get("test_accuracy") for e in ep], marker=".", label=label)
        axes[0].set(xlabel="step", ylabel="training loss", title="loss over steps", yscale="log")
        axes[1].set(
            xlabel="training seconds", ylabel="epoch loss", title="loss over time", yscale="log"
        )
        axes[2].set(xlabel="training seconds", ylabel="test accuracy", title="accuracy over time")
        for ax in axes:
            ax.legend(fontsize=7)
        out.append(
            _figure(
                _png(fig), "loss and accuracy curves (lowest seed of each engine and worker count)"
            )
        )

        fig, ax = plt.subplots(figsize=(8, 3.6))
        labels, data = [], []
        for (engine, workers), r in sorted(first.items()):
            for rank, times in enumerate(r.get("step_times_s") or []):
                labels.append(f"{engine}\nnp{workers} r{rank}")
                data.append(np.asarray(times) * 1e3)
        if data:
            ax.boxplot(data, showfliers=False)
            ax.set_xticks(range(1, len(labels) + 1), labels, fontsize=7)
            ax.set(ylabel="step time (ms)", title="per-rank step time spread")
            out.append(
                _figure(_png(fig), "per-rank step times (boxes: quartiles, whiskers: 1.5 IQR)")
            )
    return out


def _collective_plot(parts: dict[str, pd.DataFrame]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bw = parts["bus bandwidth GB/s"]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for col in bw.columns:
        ax.plot(range(len(bw.index)), bw[col], marker="o", label=str(col))
    ax.set_xticks(range(len(bw.index)), list(bw.index), rotation=45, fontsize=7)
    ax.set(xlabel="message size", ylabel="bus bandwidth (GB/s)", title="allreduce bus bandwidth")
    ax.legend(fontsize=7)
    return _figure(_png(fig), "allreduce bus bandwidth by message size")


def _header(recs: list[dict[str, Any]], problems: Sequence[records.Problem]) -> str:
    envs = [r.get("env") or {} for r in recs]
    machines = sorted(
        {f"{e.get('hostname', '?')}: {e.get('cpu', '?')} x{e.get('cpu_count', '?')}" for e in envs}
    )
    libs = sorted({json.dumps(e.get("libraries", {}), sort_keys=True) for e in envs})
    parts = ["<h2>What was compared</h2><ul>"]
    parts.append(f"<li>{len(recs)} records; machines: {_esc('; '.join(machines))}</li>")
    parts.append(f"<li>library versions: {_esc(' | '.join(libs))}</li>")
    if len(libs) > 1 or len(machines) > 1:
        parts.append(
            '<li class="warn">WARNING: records come from different machines or library versions</li>'
        )
    parts.append(f"<li>records skipped: {len(problems)}</li></ul>")
    if problems:
        parts.append(
            "<ul>" + "".join(f'<li class="note">{_esc(p)}</li>' for p in problems) + "</ul>"
        )
    return "".join(parts)


def render(
    recs: list[dict[str, Any]],
    problems: Sequence[records.Problem] = (),
    target: float = report.DEFAULT_TARGET,
) -> str:
    """The whole report as one HTML string."""
    FIGURES.clear()
    comps = report.compare(recs, target)
    body = ["<h1>Data-parallel training engines compared</h1>", _header(recs, problems)]
    for comp in comps:
        spec: dict[str, Any] = next(
            (r.get("spec") or {} for r in recs if r.get("run_id") in comp.run_ids),
            {},
        )
        body.append(f"<h2>{_esc(comp.title)}</h2>")
        body.append(f"<p><b>machine:</b> {_esc(comp.machine)} | {_esc(comp.libraries)}</p>")
        body.append(f'<p class="note">spec: {_esc(json.dumps(spec, sort_keys=True))}</p>')
        for name, df in comp.sections.items():
            if not df.empty:
                body.append(f"<h3>{_esc(name)}</h3>")
                body.append(report.formatted(df).to_html(index=False, escape=True, border=0))
        body.extend(_plots(comp, recs))
        body.append(
            "<ul>"
            + "".join(
                f'<li class="{"warn" if n.startswith("WARNING") else "note"}">{_esc(n)}</li>'
                for n in comp.notes
            )
            + "</ul>"
        )
    parts = collectives.tables(recs)
    if parts:
        body.append("<h2>Collectives</h2>")
        for name, df in parts.items():
            body.append(
                f"<h3>{_esc(name)}</h3>" + df.to_html(escape=True, border=0, float_format="%.3f")
            )
        body.append(_collective_plot(parts))
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
