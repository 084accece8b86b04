"""`bench compare`'s tables and BASE/NEW changes: what the command makes once
bench/cli/compare.py has parsed its arguments and found no replay of them
(bench/cli/replay.py). Apart from that module so that a replay loads no pandas."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from bench import records
from bench.cli.common import (
    DEFAULT_TARGET,
    EXIT_BAD_INPUT,
    not_records,
    report_skipped,
    write_file,
)
from bench.core.errors import CheckError, InputError
from bench.decide.pairs import DEFAULT_PRECISION
from bench.records import summaries
from bench.render import formats, textfit
from bench.render.choices import HTML_DIR
from bench.tables import cost, frame, regress

SOURCES = ["group", "engine", "workers", "seed", "grad_sync", "status", "throughput"]
SOURCES += ["final_accuracy", "source"]


def tables(
    args: argparse.Namespace, paths: Sequence[str], precision: float, show: set[str] | None
) -> int:
    """The comparison tables of the records under `paths`, as `args` ask for them."""
    try:
        price = (
            None if args.price_per_hour is None else cost.Price(args.price_per_hour, args.price_per)
        )
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return print_tables(
        paths,
        args.format,
        args.sources,
        args.target_accuracy,
        args.out,
        price,
        args.wide,
        precision,
        args.error_rates or (show is not None and "error rates" in show),
        show,
    )


def print_tables(
    paths: Sequence[str],
    fmt: str,
    sources: bool,
    target: float = DEFAULT_TARGET,
    out_dir: str | None = None,
    price: cost.Price | None = None,
    wide: bool = False,
    precision: float = DEFAULT_PRECISION,
    error_rates: bool = False,
    show: set[str] | None = None,
) -> int:
    """Print the comparison of the records under `paths` (and write it under `out_dir`):
    each comparison's summary, then the sections `show` names; text fits the terminal
    unless `wide`."""
    wrong = not_records(paths)
    if wrong:
        print(f"error: {wrong}", file=sys.stderr)
        return EXIT_BAD_INPUT
    runs, loaded = _read(paths, fmt, target)
    report_skipped(loaded)
    width = textfit.width(wide)
    text = formats.render(
        loaded,
        fmt,
        target,
        width=width,
        precision=precision,
        error_rates=error_rates,
        show=show,
        runs=runs.frame,
    )
    if text is None:
        print(
            f"no readable records under {', '.join(paths)}; run `bench run` or a runner first",
            file=sys.stderr,
        )
        return 1
    if fmt in ("text", "markdown"):
        costs = _costs(cost.table([], price, target, runs.frame), price, width)
        if costs and (price is not None or cost.measured(runs.frame)):
            text += ("\n```\n" + costs + "\n```\n") if fmt == "markdown" else "\n" + costs + "\n"
    if fmt == "html":
        # the figures are inline, so the one file is the whole report; never the terminal
        out_dir = out_dir or HTML_DIR
    if out_dir:
        status = write_file(Path(out_dir) / f"report.{formats.SUFFIX[fmt]}", text)
        if status:
            return status
    if fmt != "html":
        print(text)
    if sources:
        print("\n".join(_sources(runs.frame, width)))
    print(f"{runs.count} records read, {len(loaded.problems)} skipped", file=sys.stderr)
    return 0


def _read(paths: Sequence[str], fmt: str, target: float) -> tuple[frame.Runs, records.Loaded]:
    """The runs and records a report reads. Tables need no per-step arrays: one frame
    from each file's columnar cache of runs; the html report plots the arrays, so it
    reads the records whole."""
    if fmt != "html":
        return frame.read(paths, target)
    loaded = records.load(paths)
    runs = frame.frame(loaded.records, target)
    return frame.Runs(runs, loaded.records, len(loaded.records)), loaded


def _costs(table: pd.DataFrame, price: cost.Price | None, width: int | None) -> str | None:
    """The cost and energy table (bench.tables.cost) fitted to `width`: its caption
    once, then one table per comparison under that comparison's title."""
    if table.empty:
        return None
    what = f"price {price.per_hour:g} per {price.per}-hour" if price else "no price given"
    caption = (
        f"cost and energy ({what}; median throughput; time to target over the runs that "
        "reached it; power over the timed span):"
    )
    lines = textfit.wrap(caption, width)
    for title, rows in table.groupby("comparison", sort=False):
        lines += ["", *textfit.wrap(str(title), width, "  ")]
        lines += textfit.table(rows.drop(columns=["comparison"]), width, "    ")
    return "\n".join(lines)


def _sources(df: pd.DataFrame, width: int | None) -> list[str]:
    """The record (file and line) behind every run, fitted to `width` like the tables: the
    files are numbered once above the table, so a long path never widens a row."""
    rows = df[SOURCES].sort_values(SOURCES[:5]).reset_index(drop=True)
    where = rows.pop("source").fillna("?:?").astype(str).str.rpartition(":")
    path, line = list(where[0]), list(where[2])
    files = sorted(set(path))
    rows["grad_sync"] = ["yes" if v else "no" for v in rows["grad_sync"]]
    rows["samples/s"] = ["-" if pd.isna(v) else f"{v:,.0f}" for v in rows.pop("throughput")]
    rows["accuracy"] = ["-" if pd.isna(v) else f"{v:.2%}" for v in rows.pop("final_accuracy")]
    rows.insert(4, "file", [str(files.index(p) + 1) for p in path])
    rows.insert(5, "line", line)  # beside the run it names, in the first part of a split
    lines = ["record behind each run (file, line):"]
    lines += [
        w for n, f in enumerate(files, 1) for w in textfit.wrap(f"file {n}: {f}", width, "  ")
    ]
    return lines + textfit.table(rows, width, "  ", keys=("group", "engine", "workers", "seed"))


def diff(args: argparse.Namespace) -> int:
    """Regression mode: the change of each cell from --base to --new."""
    try:
        checks = [regress.RegressionCheck.parse(f) for f in args.fail]
    except CheckError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.format == "html":  # refused, not silently ignored
        print(
            "error: --format html draws one set's tables; --base/--new writes text, markdown, "
            "csv or json (one HTML report over both: bench compare BASE NEW --format html)",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    # both paths checked before either is read: a mistyped NEW is one line, not BASE's
    # skipped lines and then the error
    wrong = not_records([args.base, args.new])
    if wrong:
        print(f"error: {wrong}", file=sys.stderr)
        return EXIT_BAD_INPUT
    sets = []
    for path in (args.base, args.new):
        loaded = summaries.load_summaries([path])
        report_skipped(loaded)
        sets.append(loaded.records)
    min_effect = regress.DEFAULT_MIN_EFFECT if args.min_effect is None else args.min_effect
    df = regress.diff(sets[0], sets[1], min_effect)
    apart = regress.protocols_apart(sets[0], sets[1])
    if apart and not df.empty:
        print(f"note: {apart}", file=sys.stderr)
    if df.empty:
        why = regress.why_unmatched(sets[0], sets[1])
        print(f"no cell is present in both {args.base} and {args.new}{why}", file=sys.stderr)
        return EXIT_BAD_INPUT  # nothing compared is a usage error; 1 means a regression
    if args.format == "json":
        text = df.to_json(orient="records", indent=1) + "\n"
    elif args.format == "csv":
        text = df.to_csv(index=False)
    else:
        markdown = args.format == "markdown"
        text = formats.regress_text(df, markdown, width=textfit.width(args.wide)) + "\n"
    print(text, end="")
    if args.out:
        status = write_file(Path(args.out) / f"diff.{formats.SUFFIX[args.format]}", text)
        if status:
            return status
    failures = [msg for row in df.to_dict("records") for c in checks if (msg := c.fails(row))]
    for msg in failures:
        print(f"REGRESSION: {msg}", file=sys.stderr)
    return 1 if failures else 0
