"""The HTML report's figures: one builder per figure, drawn with matplotlib (Agg) into PNGs.

Every plotted number comes from the records and comparisons passed in; a builder
returns its figure as page HTML (an inline data URI under its caption), or nothing
where its data is absent. Each engine keeps its colour and line in every figure
(`Style`); the page around them is bench/render/html.py's.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from bench import engines
from bench.records import LoadedRecord, Status
from bench.tables import breakdown, compare
from bench.tables.frame import usable


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


# Each engine's own colour and line come from its registry entry; other labels
# (options, multi-node variants) get the next spare colours in sorted order. One
# Style per report, so a label keeps its colour in every figure.
_MORE_COLOURS = ["#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"]


def _base(label: str) -> str:
    return label.split("[")[0].split("@")[0].split("/")[0]


def _entry(label: str) -> engines.EngineEntry | None:
    try:
        return engines.get(_base(label))
    except ValueError:  # a record of an engine not registered here
        return None


class Style:
    """Colour, line style and marker of every engine label in one report.

    A plain engine label gets its entry's colour; its variants share its line style
    and marker (so curves that coincide stay visible), with spare colours.
    """

    def __init__(self, labels: Sequence[str]) -> None:
        self.colours: dict[str, str] = {}
        spare = iter(_MORE_COLOURS * (1 + len(labels) // len(_MORE_COLOURS)))
        own = {lab: e.colour for lab in labels if (e := _entry(lab)) and lab == e.name and e.colour}
        for label in sorted(set(labels), key=lambda x: (x not in own, x)):
            self.colours[label] = own.get(label) or next(spare)

    def colour(self, label: str) -> str:
        return self.colours.get(label, "#444444")

    def line(self, label: str) -> dict[str, Any]:
        entry = _entry(label)
        ls, marker = entry.line if entry else ("-", "D")
        return {"color": self.colour(label), "ls": ls, "marker": marker}


class Figures:
    """Draws figures into PNGs: data URIs for the page, bytes for `--out`."""

    def __init__(self) -> None:
        self.png: list[bytes] = []

    def add(self, fig: Any, caption: str) -> str:
        plt = pyplot()
        buf = io.BytesIO()
        # Laid out while drawing, not by bbox_inches="tight", which draws every figure
        # twice (half the time of a report with many comparisons).
        if fig.get_layout_engine() is None:
            fig.set_layout_engine("constrained")
        fig.savefig(buf, format="png", dpi=90)
        plt.close(fig)
        self.png.append(buf.getvalue())
        src = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
        return (
            f'<figure><img class="plot" src="{src}" alt="{_esc(caption)}">'
            f"<figcaption>{_esc(caption)}</figcaption></figure>"
        )


def pyplot() -> Any:
    """pyplot on the Agg backend (no display), imported when a report is drawn: it takes
    most of a second, which no text comparison should pay."""
    import matplotlib  # lazy: heavy, and only the HTML report draws

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: as above

    return plt


def _err(rows: pd.DataFrame) -> np.ndarray:
    """Asymmetric error bars from value/low/high columns (0 where there is no interval)."""
    low = (rows["value"] - rows["low"].astype(float)).fillna(0.0).clip(lower=0)
    high = (rows["high"].astype(float) - rows["value"]).fillna(0.0).clip(lower=0)
    return np.vstack([low.to_numpy(), high.to_numpy()])


def _dodge(labels: Sequence[str], width: float = 0.08) -> dict[str, float]:
    """Small x offsets so that error bars of different engines at one x do not overlap."""
    n = len(labels)
    return {label: (i - (n - 1) / 2) * width for i, label in enumerate(labels)}


def _scaling_figure(comp: compare.Comparison, style: Style, figs: Figures) -> list[str]:
    iv = comp.intervals
    if iv.empty or not (iv["metric"] == "samples/s").any():
        return []
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
    engines = sorted(iv["engine"].unique())
    shift = _dodge(engines)
    for engine in engines:
        tp = iv[(iv["engine"] == engine) & (iv["metric"] == "samples/s")].sort_values("workers")
        kw = style.line(engine)
        x = tp["workers"] + shift[engine]
        ax1.errorbar(x, tp["value"], yerr=_err(tp), capsize=3, label=engine, **kw)
        one = tp[tp["workers"] == 1]["value"]
        if not one.empty:
            ax1.plot(tp["workers"], one.iloc[0] * tp["workers"], ls=":", lw=1, color=kw["color"])
        eff = iv[(iv["engine"] == engine) & (iv["metric"] == "efficiency")].sort_values("workers")
        if not eff.empty:
            ax2.errorbar(
                eff["workers"] + shift[engine],
                eff["value"],
                yerr=_err(eff),
                capsize=3,
                label=engine,
                **kw,
            )
    ax1.set(
        xlabel="workers",
        ylabel="samples/s (median, 95% CI)",
        title="throughput (dotted: ideal linear from 1 worker)",
    )
    ax1.set_ylim(bottom=0)
    ax2.axhline(1.0, ls=":", color="grey")
    ax2.set(xlabel="workers", ylabel="efficiency (95% CI)", title="scaling efficiency")
    ax2.set_ylim(0, max(1.1, float(ax2.get_ylim()[1])))
    for ax in (ax1, ax2):
        ax.legend(fontsize=7)
        ax.set_xticks(sorted(iv["workers"].unique()))
    return [
        figs.add(
            fig,
            "throughput and scaling efficiency: medians with 95% intervals (n beside each "
            "in the tables) as error bars, axes from 0",
        )
    ]


def _smooth(values: Sequence[float | str | None], window: int) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if window <= 1 or arr.size < window:
        return arr
    return pd.Series(arr).rolling(window, min_periods=1).mean().to_numpy()


def _curves_figure(
    frame: pd.DataFrame, by_id: dict[str, LoadedRecord], style: Style, figs: Figures
) -> list[str]:
    ok = usable(frame)
    if ok.empty:
        return []
    # one run per (engine, workers): the lowest seed, so that curves are comparable
    first = ok.sort_values("seed").groupby(["engine", "workers"], sort=True).head(1)
    workers = sorted(first["workers"].unique())[:4]
    plt = pyplot()
    fig, axes = plt.subplots(
        1, len(workers) + 1, figsize=(4.2 * (len(workers) + 1), 3.6), layout="constrained"
    )
    engines = sorted(first["engine"].unique())
    lw = {e: 3.2 - 2.2 * i / max(len(engines) - 1, 1) for i, e in enumerate(engines)}
    window = 1
    for ax, w in zip(axes, workers, strict=False):
        rows = first[first["workers"] == w].sort_values("engine")
        window = _loss_panel(ax, rows, by_id, style, lw, len(engines))
        ax.set(
            xlabel="samples seen",
            ylabel="training loss",
            yscale="log",
            title=f"loss, {w} worker{'s' if w > 1 else ''}",
        )
        ax.legend(fontsize=7)
    _accuracy_panel(axes[-1], first, by_id, style, lw, workers[0])
    return [
        figs.add(
            fig,
            "training loss against samples seen ("
            + (f"moving average over ~{window} steps; " if window > 1 else "")
            + "lowest seed per engine and worker count) and test accuracy per epoch; "
            "engines that coincide are drawn with different dashes, markers and widths",
        )
    ]


def _loss_panel(
    ax: Any,
    rows: pd.DataFrame,
    by_id: dict[str, LoadedRecord],
    style: Style,
    lw: dict[str, float],
    n_engines: int,
) -> int:
    """One worker count's loss curves; returns the moving-average window used."""
    window = 1
    for k, (_, row) in enumerate(rows.iterrows()):
        r = by_id[row["run_id"]]
        losses = r.get("step_losses") or []
        batch = r.get("global_batch") or 1
        window = max(1, len(losses) // 25)
        x = np.arange(1, len(losses) + 1) * batch
        n = max(len(losses) // 8, 1)
        ax.plot(
            x,
            _smooth(losses, window),
            lw=lw[row["engine"]],
            alpha=0.85,
            markevery=(k * n // max(n_engines, 1), n),
            label=row["engine"],
            **style.line(row["engine"]),
        )
    return window


def _accuracy_panel(
    acc: Any,
    first: pd.DataFrame,
    by_id: dict[str, LoadedRecord],
    style: Style,
    lw: dict[str, float],
    fewest: int,
) -> None:
    for _, row in first.sort_values(["engine", "workers"]).iterrows():
        ep = by_id[row["run_id"]].get("epochs") or []
        kw = style.line(row["engine"])
        acc.plot(
            [e.get("samples_seen") for e in ep],
            [e.get("test_accuracy") for e in ep],
            lw=lw[row["engine"]],
            alpha=0.85,
            label=f"{row['engine']} np={row['workers']}",
            **{**kw, "ls": kw["ls"] if row["workers"] == fewest else (0, (3, 1, 1, 1))},
        )
    acc.set(xlabel="samples seen", ylabel="test accuracy", title="test accuracy per epoch")
    acc.legend(fontsize=7)


def _comm_figure(comp: compare.Comparison, style: Style, figs: Figures) -> list[str]:
    iv = comp.intervals
    twin = iv[iv["metric"] == "twin samples/s"] if not iv.empty else iv
    if twin.empty:
        return []
    real = iv[iv["metric"] == "samples/s"].set_index(["engine", "workers"])
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(twin)), 3.8))
    comm = comp.sections["throughput"].set_index(["engine", "workers"])["comm %"]
    labels = []
    for i, (_, t) in enumerate(twin.sort_values(["workers", "engine"]).iterrows()):
        key = (t["engine"], t["workers"])
        r = real.loc[[key]]
        colour = style.colour(t["engine"])
        ax.bar(i - 0.2, r["value"], 0.4, yerr=_err(r), capsize=3, color=colour)
        ax.bar(
            i + 0.2,
            t["value"],
            0.4,
            yerr=_err(t.to_frame().T),
            capsize=3,
            color=colour,
            alpha=0.35,
            hatch="//",
            edgecolor=colour,
        )
        ax.annotate(
            f"comm {comm.loc[key]}",
            (i, max(float(r["value"].iloc[0]), t["value"])),
            textcoords="offset points",
            xytext=(0, 8),
            ha="center",
            fontsize=7,
        )
        labels.append(f"{t['engine']}\nnp={t['workers']}")
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylim(bottom=0, top=float(ax.get_ylim()[1]) * 1.12)
    ax.set(
        ylabel="samples/s (median, 95% CI)", title="real run (solid) vs compute-only twin (hatched)"
    )
    return [
        figs.add(
            fig,
            "communication cost: throughput of each multi-worker cell and of its "
            "grad_sync=false twin; comm % = 1 - real / twin, with its interval",
        )
    ]


_STACK_COLOURS = ("#4c72b0", "#8172b2", "#c44e52", "#bbbbbb")  # compute .. other


def _breakdown_figure(comp: compare.Comparison, figs: Figures) -> list[str]:
    table = comp.sections.get("where the step goes (ms)")
    if table is None or table.empty:
        return []
    bars = breakdown.stacked(table)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 0.9 + 0.4 * len(bars)))
    for i, (_, values) in enumerate(bars):
        left = 0.0
        for j, (name, v) in enumerate(zip(breakdown.CATEGORIES, values, strict=True)):
            ax.barh(i, v, left=left, color=_STACK_COLOURS[j], label=name if i == 0 else None)
            left += v
    ax.set_yticks(range(len(bars)), [label for label, _ in bars], fontsize=8)
    ax.invert_yaxis()
    ax.set(xlabel="ms per step (medians over runs)", title="where the step goes")
    ax.legend(fontsize=7, loc="lower right")
    return [
        figs.add(
            fig,
            "where the step goes: compute and optimizer from the compute-only twin's "
            "profiled steps, exposed communication = step - twin step, other = the rest "
            "(hidden communication overlaps compute and is in the table)",
        )
    ]


def _head_to_head_figure(comp: compare.Comparison, style: Style, figs: Figures) -> list[str]:
    iv = comp.intervals
    h2h = iv[iv["metric"] == "vs fastest"] if not iv.empty else iv
    if h2h.empty or h2h["engine"].nunique() < 2:
        return []
    rows = h2h.sort_values(["workers", "engine"], ascending=[False, False]).reset_index(drop=True)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 0.9 + 0.35 * len(rows)))
    for i, row in rows.iterrows():
        ax.errorbar(
            row["value"],
            i,
            xerr=_err(row.to_frame().T),
            fmt=style.line(row["engine"])["marker"],
            color=style.colour(row["engine"]),
            capsize=3,
            ms=6,
        )
    ax.axvline(1.0, ls=":", color="grey")
    ax.set_yticks(
        range(len(rows)),
        [f"{e} np={w}" for e, w in zip(rows["engine"], rows["workers"], strict=True)],
        fontsize=8,
    )
    ax.set_xlim(0, max(1.1, float(ax.get_xlim()[1])))
    ax.set(
        xlabel="median throughput / fastest engine's at the same workers (95% CI)",
        title="head to head",
    )
    return [
        figs.add(
            fig,
            "head to head: each engine's throughput relative to the fastest at the "
            "same worker count; an interval wholly below 1 is significantly slower",
        )
    ]


def _time_to_accuracy_figure(
    frame: pd.DataFrame, target: float, style: Style, figs: Figures
) -> list[str]:
    ok = usable(frame)
    if ok.empty:
        return []
    cells = sorted(ok.groupby(["workers", "engine"]), key=lambda kv: kv[0])
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(5, 1.1 * len(cells)), 3.6))
    labels = []
    top = 0.0
    for i, ((w, engine), cell) in enumerate(cells):
        times = cell["time_to_target"].dropna().astype(float)
        labels.append(f"{engine}\nnp={w}")
        if times.empty:
            ax.annotate(
                f"not reached\n(0/{len(cell)})",
                (i, 0),
                ha="center",
                va="bottom",
                fontsize=7,
                color=style.colour(engine),
            )
            continue
        med = float(times.median())
        top = max(top, float(times.max()))
        ax.bar(
            i,
            med,
            0.6,
            color=style.colour(engine),
            yerr=[[med - float(times.min())], [float(times.max()) - med]],
            capsize=3,
        )
        ax.annotate(
            f"{len(times)}/{len(cell)}",
            (i, float(times.max())),
            textcoords="offset points",
            xytext=(0, 3),
            ha="center",
            fontsize=7,
        )
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylim(0, max(top * 1.15, 1e-9))
    ax.set(ylabel="training seconds (median; min-max)", title=f"time to {target:.0%} test accuracy")
    return [
        figs.add(
            fig,
            f"time to {target:.0%} test accuracy: training seconds of the slowest "
            "rank, evaluation excluded; n/m = runs that reached it",
        )
    ]


_TIMELINE_PARTS = ("negotiation", "allreduce", "wait")


def _timeline_rows(frame: pd.DataFrame, by_id: dict[str, LoadedRecord]) -> list[dict[str, Any]]:
    """Per ok run with a timeline: its per-step negotiation, allreduce and wait (ms)."""
    rows = []
    for _, row in frame[(frame["status"] == Status.OK)].iterrows():
        per = ((by_id[row["run_id"]].get("timeline") or {}).get("per_step_ms")) or {}
        if per:
            rows.append(
                {
                    "engine": row["engine"],
                    "workers": row["workers"],
                    **{p: float(per.get(p) or 0.0) for p in _TIMELINE_PARTS},
                    "step": 1e3 * float(row["step_p50"]),
                }
            )
    return rows


def _timeline_figure(
    frame: pd.DataFrame, by_id: dict[str, LoadedRecord], style: Style, figs: Figures
) -> list[str]:
    rows = _timeline_rows(frame, by_id)
    if not rows:
        return []
    df = pd.DataFrame(rows).groupby(["workers", "engine"]).median().reset_index()
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.45 * len(df)))
    alphas = {"negotiation": 0.35, "allreduce": 0.9, "wait": 0.6}
    hatches = {"negotiation": "..", "allreduce": "", "wait": "xx"}
    for i, row in df.iterrows():
        left = 0.0
        for p in _TIMELINE_PARTS:
            ax.barh(
                i,
                row[p],
                left=left,
                color=style.colour(row["engine"]),
                alpha=alphas[p],
                hatch=hatches[p],
                edgecolor="black",
                lw=0.3,
                label=p if i == 0 else None,
            )
            left += row[p]
        if not np.isnan(row["step"]):
            ax.plot(
                row["step"],
                i,
                marker="|",
                ms=14,
                color="black",
                label="step time p50" if i == 0 else None,
            )
    ax.set_yticks(
        range(len(df)),
        [f"{e} np={w}" for e, w in zip(df["engine"], df["workers"], strict=True)],
        fontsize=8,
    )
    ax.set_xlim(left=0)
    ax.set(
        xlabel="ms per training step (median over runs)",
        title="Horovod timeline: gradient allreduce per step",
    )
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return [
        figs.add(
            fig,
            "Horovod timeline breakdown per step: negotiation, allreduce and wait, "
            "summed over tensors (busy time, so they may exceed the step time shown)",
        )
    ]


def _spread_figure(
    frame: pd.DataFrame, by_id: dict[str, LoadedRecord], style: Style, figs: Figures
) -> list[str]:
    ok = usable(frame)
    first = ok.sort_values("seed").groupby(["engine", "workers"], sort=True).head(1)
    labels, data, colours = [], [], []
    for _, row in first.sort_values(["workers", "engine"]).iterrows():
        for rank, times in enumerate(by_id[row["run_id"]].get("step_times_s") or []):
            labels.append(f"{row['engine']}\nnp{row['workers']} r{rank}")
            data.append(np.asarray(times) * 1e3)
            colours.append(style.colour(row["engine"]))
    if not data:
        return []
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(6, 0.8 * len(data)), 3.6))
    box = ax.boxplot(data, showfliers=False, patch_artist=True, medianprops={"color": "black"})
    for patch, colour in zip(box["boxes"], colours, strict=True):
        patch.set(facecolor=colour, alpha=0.5)
    ax.set_xticks(range(1, len(labels) + 1), labels, fontsize=7)
    ax.set_ylim(bottom=0)
    ax.set(ylabel="step time (ms)", title="per-rank step time spread")
    return [
        figs.add(
            fig, "per-rank step times, lowest seed per cell (boxes: quartiles, whiskers: 1.5 IQR)"
        )
    ]


def plots(
    comp: compare.Comparison,
    recs: Sequence[LoadedRecord],
    runs: pd.DataFrame,
    target: float,
    style: Style,
    figs: Figures,
) -> list[str]:
    """One comparison's figures, in page order. `runs` is the report's frame, every
    comparison's rows (`frame.frame`); this one draws its own."""
    ids = set(comp.run_ids)
    by_id = {str(r.get("run_id")): r for r in recs if r.get("run_id") in ids}
    mine = runs[runs["run_id"].isin(ids)].reset_index(drop=True) if not runs.empty else runs
    out = _scaling_figure(comp, style, figs)
    if not mine.empty:
        out += _curves_figure(mine, by_id, style, figs)
    out += _comm_figure(comp, style, figs)
    out += _breakdown_figure(comp, figs)
    out += _head_to_head_figure(comp, style, figs)
    if not mine.empty:
        out += _time_to_accuracy_figure(mine, target, style, figs)
        out += _timeline_figure(mine, by_id, style, figs)
        out += _spread_figure(mine, by_id, style, figs)
    return out


def collective_plot(parts: dict[str, pd.DataFrame], style: Style, figs: Figures) -> str:
    plt = pyplot()
    bw = parts["bus bandwidth GB/s"]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for col in bw.columns:
        engine, _, np_ = str(col).partition(" ")
        kw = style.line(engine)
        ax.plot(
            range(len(bw.index)),
            bw[col],
            label=str(col),
            **{**kw, "ls": kw["ls"] if np_ in ("np2", "") else "-."},
        )
    ax.set_xticks(range(len(bw.index)), list(bw.index), rotation=45, fontsize=7)
    ax.set_ylim(bottom=0)
    ax.set(xlabel="message size", ylabel="bus bandwidth (GB/s)", title="allreduce bus bandwidth")
    ax.legend(fontsize=7)
    return figs.add(fig, "allreduce bus bandwidth by message size")
