"""The answer first: one screen per comparison, as hyperfine and asv give theirs.

Per comparison, in this order: what was compared (two title lines), one table (a row
per engine and worker count: samples/s with its interval, per worker, efficiency with
its interval, accuracy, the verdict's one word), the answers as sentences (each pair's
one reading: faster by how much, equivalent, or not settled and the command that would
settle it), why each multi-worker cell loses what it loses, the warnings that change
the reading, and a last line naming what else there is. Every figure is one the
sections show in full (`--all`), from the same readings.
"""

from __future__ import annotations

import shlex
from typing import Any

import pandas as pd

import models
from bench import engines
from bench.contract import flags
from bench.decide import rule
from bench.render import textfit
from bench.render.choices import SECTIONS as SECTIONS  # `--show` names: the CLI's
from bench.tables import decided
from bench.tables.compare import Comparison


def render(comp: Comparison, width: int | None) -> list[str]:
    """The summary of one comparison as lines of at most `width` columns."""
    lines = _title(comp, width)
    lines += ["", *textfit.table(_table(comp), width, keys=("engine",))]
    answers = _answers(comp, width)
    if answers:
        lines += ["", *answers]
    why = _why(comp, width)
    if why:
        lines += ["", "  why:", *why]
    lines += [*_warnings(comp, width)]
    shown = ", ".join(
        n for n, s in SECTIONS.items() if s in comp.sections or n in ("knobs", "notes")
    )
    lines += textfit.wrap(
        f"more (--show NAME,NAME or --all): {shown}; --format json keeps every figure",
        width,
        "  ",
    )
    return lines


def _title(comp: Comparison, width: int | None) -> list[str]:
    runs = comp.frame["runs"] if "runs" in comp.frame else pd.Series(dtype=int)
    counts = sorted({int(n) for n in runs if n})
    per_cell = (
        f"{counts[0]} run{'s' if counts[0] > 1 else ''} a cell"
        if len(counts) == 1
        else f"{counts[0]}-{counts[-1]} runs a cell"
        if counts
        else "no runs"
    )
    own = set(engines.frameworks())
    libs = ", ".join(x for x in comp.libraries.split(", ") if x.split(" ")[0] in own)
    title = comp.title.replace(" scaling, batch", ", batch")  # two lines at 100 columns
    return textfit.wrap(f"{title} | {comp.machine} | {libs} | {per_cell}", width)


def _cell(engine: object, workers: object) -> str:
    return f"{engine} x{int(str(workers))}"


def _table(comp: Comparison) -> pd.DataFrame:
    """A row per cell: samples/s [CI], per worker, efficiency [CI], accuracy, verdict."""
    tp = comp.frame
    acc = comp.sections.get("accuracy", pd.DataFrame())
    accuracy = {(r["engine"], r["workers"]): r["accuracy"] for _, r in acc.iterrows()}
    verdicts = comp.sections.get("verdict", pd.DataFrame())
    word = {(r["engine"], r["workers"]): r["verdict"] for _, r in verdicts.iterrows()}
    rows = []
    for _, r in tp.iterrows():
        key = (r["engine"], r["workers"])
        value = r["samples/s"]
        rows.append(
            {
                "engine": _cell(*key),
                "samples/s [95% CI]": "-"
                if pd.isna(value)
                else f"{value:,.0f} {_bare(r['95% CI'])}",
                "per worker": "-" if pd.isna(value) else f"{value / int(r['workers']):,.0f}",
                "efficiency [95% CI]": (
                    "-"
                    if pd.isna(r["efficiency"]) or int(r["workers"]) == 1
                    else f"{r['efficiency']:.2f} {_bare(r['eff. 95% CI'])}"
                ),
                "accuracy": "-" if pd.isna(accuracy.get(key)) else f"{accuracy[key]:.2%}",
                "why": word.get(key, "-"),
            }
        )
    table = pd.DataFrame(rows)
    return table if word else table.drop(columns=["why"])  # no step breakdown recorded


def _bare(interval: Any) -> str:
    """'[low, high]' of an interval shown as '[low, high] n=N' (the title says n)."""
    text = str(interval)
    return text.split(" n=")[0] if text.startswith("[") else "(too few runs)"


def _answers(comp: Comparison, width: int | None) -> list[str]:
    """One sentence a head-to-head, from its one reading; then, where pairs are open,
    the least minutes any allocation would need."""
    readings = comp.readings
    if readings is None:
        return []
    heads = [r for r in readings.all if r.pair.what == "head to head"]
    if not heads:
        return []
    how = {r.decision.reading for r in heads}
    read = " and ".join(sorted(how))
    lines = [f"  answers ({read}; equivalent within {readings.precision:.0%}):"]
    for r in sorted(heads, key=lambda r: r.pair.workers):
        lines += textfit.wrap(f"x{r.pair.workers}  {sentence(r, comp)}", width, "    ", "      ")
    reach = decided.reach_line(decided.reach([readings]))
    if reach:
        lines += textfit.wrap(f"open pairs: {reach}", width, "    ", "      ")
    return lines


def sentence(r: decided.Reading, comp: Comparison) -> str:
    """`ddp is 1.20x [1.04, 1.39] as fast as horovod`, `ddp and paddle are equivalent
    within 5%`, or `ddp vs horovod: not settled ...` with what would settle it."""
    d, p = r.decision, r.pair
    if d.low is None or d.high is None:
        return f"{p.a} vs {p.b}: too few runs to read (at least {rule.MIN_SIDE} a side)"
    fast, slow, ratio, low, high = p.a, p.b, d.ratio, d.low, d.high
    if ratio < 1:
        fast, slow, ratio, low, high = p.b, p.a, 1 / ratio, 1 / d.high, 1 / d.low
    shown = f"{ratio:.2f}x [{low:.2f}, {high:.2f}]"
    if d.outcome == rule.DIFFERENT:
        return f"{fast} is {shown} as fast as {slow}"
    precision = comp.readings.precision if comp.readings else 0.05
    if d.outcome == rule.EQUIVALENT:
        return f"{p.a} and {p.b} are equivalent within {precision:.0%} ({shown})"
    need = r.more(precision)
    if need is None:
        return (
            f"{p.a} vs {p.b}: not settled ({fast} {shown} as fast); no look of "
            "--decide-at would settle it at the measured spreads"
        )
    minutes = rule.seconds(need, r.a, r.b) / 60
    return (
        f"{p.a} vs {p.b}: not settled ({fast} {shown} as fast); about {need[0]} + "
        f"{need[1]} more launches ({minutes:.1f} min): {settle_command(r, comp)}"
    )


def settle_command(r: decided.Reading, comp: Comparison) -> str:
    """The `bench run --decide-at` that adds launches to this pair's cells, with the
    comparison's settings, into the folder its records are in."""
    precision = comp.readings.precision if comp.readings else 0.05
    spec = dict(comp.spec)
    argv = ["bench", "run", "--decide-at", f"{precision:.0%}"]
    argv += ["--engines", ",".join(sorted({_base(r.pair.a), _base(r.pair.b)}))]
    model, dataset = str(spec.pop("model", "?")), spec.pop("dataset", None)
    argv += ["--workers", str(r.pair.workers), "--models", model]
    if dataset and dataset != _default_dataset(model):
        argv += ["--datasets", str(dataset)]
    argv += flags.differing(spec)
    if len(comp.folders) == 1 and comp.folders[0] not in ("results", "."):
        argv += ["--results", comp.folders[0]]
    return shlex.join(argv)


def _default_dataset(model: str) -> str | None:
    try:
        return models.get(model).default_dataset
    except (KeyError, ValueError):  # a model no longer registered
        return None


def _base(variant: str) -> str:
    """The engine a variant name (`horovod[mpi]`, `ddp@2nodes`) runs."""
    for name in engines.Engine:
        if variant == name.value or variant.startswith((f"{name.value}[", f"{name.value}@")):
            return name.value
    return variant


def _why(comp: Comparison, width: int | None) -> list[str]:
    """A line a multi-worker cell: what it loses against its own 1 worker and the largest
    part, with the knob to try; without a step breakdown, what its compute-only twin
    says about communication."""
    lines: list[str] = []
    verdicts = comp.sections.get("verdict", pd.DataFrame())
    explained = set()
    for _, v in verdicts.iterrows():
        if int(v["workers"]) < 2:
            continue
        explained.add((v["engine"], v["workers"]))
        cell = _cell(v["engine"], v["workers"])
        if not pd.isna(v.get("lost ms")) and not pd.isna(v.get("largest ms")):
            text = (
                f"{cell} loses {v['lost ms']:.2f} ms a step against 1 worker, most in "
                f"{v['largest part']} ({v['largest ms']:.2f} ms; {v['verdict']})"
            )
        else:
            text = f"{cell}: {v['verdict']}: {_first_clause(str(v['evidence']))}"
        tip = str(v["try"]).split("; ")[0]
        lines += textfit.wrap(f"{text}; try {tip}", width, "    ", "      ")
    for _, r in comp.frame.iterrows():
        key = (r["engine"], r["workers"])
        if int(r["workers"]) < 2 or key in explained or str(r["comm %"]) == "-":
            continue
        eff = "" if pd.isna(r["efficiency"]) else f"keeps {r['efficiency']:.2f} of linear scaling; "
        share = str(r["comm %"]).split(" n=")[0]
        lines += textfit.wrap(
            f"{_cell(*key)} {eff}{share} of its throughput is lost to communication its compute "
            "did not hide (its compute-only twin)",
            width,
            "    ",
            "      ",
        )
    return lines


def _first_clause(text: str) -> str:
    return text.split("; ")[0]


def _warnings(comp: Comparison, width: int | None) -> list[str]:
    """One line a warning that changes the reading: shared CPUs, failed runs, parity."""
    lines = []
    for note in comp.notes:
        if note.startswith("WARNING: "):
            head = note.split(" (")[0].split(": not comparable")[0]
            lines.append(head.split(": ", 2)[0] + ": " + head.split(": ")[1])
        elif note.startswith("unavailable: "):
            lines.append(note.split(", ")[0].split(" recorded")[0])
        elif note.split(":")[0] in ("failed", "timeout", "diverged"):
            what, _, why = note.partition("): ")
            lines.append(f"{what.split(' (')[0]}: {why}"[:200])
    acc = comp.sections.get("accuracy", pd.DataFrame())
    if "parity vs others" in acc:
        for _, r in acc[acc["parity vs others"].astype(str).str.endswith("FLAG")].iterrows():
            gap = str(r["parity vs others"]).removesuffix(" FLAG")
            lines.append(
                f"WARNING: accuracy parity broken: {_cell(r['engine'], r['workers'])} is {gap} "
                "against the other engines"
            )
    out = []
    for line in lines:
        out += textfit.wrap(line + " (--show notes)", width, "  ")
    return out


def answers_data(comp: Comparison) -> list[dict[str, Any]]:
    """The sentences as data, for json: every head-to-head with its reading."""
    if comp.readings is None:
        return []
    out = []
    for r in comp.readings.all:
        if r.pair.what != "head to head":
            continue
        d = r.decision
        need = r.more(comp.readings.precision)
        out.append(
            {
                "workers": r.pair.workers,
                "a": r.pair.a,
                "b": r.pair.b,
                "ratio": d.ratio,
                "low": d.low,
                "high": d.high,
                "outcome": d.outcome,
                "read": d.reading,
                "sentence": sentence(r, comp),
                "more launches": list(need) if need else None,
                "command": settle_command(r, comp) if need else None,
            }
        )
    return out


def table(comp: Comparison) -> pd.DataFrame:
    """The summary's table (display strings), for the markdown and HTML reports."""
    return _table(comp)


def items(comp: Comparison) -> list[tuple[str, list[str]]]:
    """The summary's answers, why and warnings as (heading, one string an item)."""
    heads = {"answers": _answers, "why": _why, "warnings": _warnings}
    out = []
    for name, part in heads.items():
        found = [line.strip() for line in part(comp, None) if not line.strip().endswith(":")]
        if found:
            out.append((name, found))
    return out


def markdown(comp: Comparison) -> str:
    """The summary for a pull-request comment: the table, then the answers, why and
    warnings as bullets."""
    out = [_table(comp).to_markdown(index=False), ""]
    out += [f"- {item}" for _, found in items(comp) for item in found]
    return "\n".join(out) + "\n"
