"""`bench compare`: the comparison tables of result records, or the change from BASE to NEW."""

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
    parse_precision,
    report_skipped,
    write_file,
)
from bench.core.errors import CheckError, InputError
from bench.decide.pairs import DEFAULT_PRECISION
from bench.records import summaries
from bench.render import formats, summary, textfit
from bench.tables import cost, frame, regress

DESCRIPTION = (
    "Tables over every record under PATHS (results/reference/ only when named), one "
    "comparison per spec, machine, library versions and measurement protocol; or, with "
    "--base and --new, the change of each cell between two result sets."
)
# where --format html writes without --out: a page is not for the terminal
HTML_DIR = "report"
SOURCES = ["group", "engine", "workers", "seed", "grad_sync", "status", "throughput"]
SOURCES += ["final_accuracy", "source"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "paths",
        nargs="*",
        help="result files or directories for the tables (default: results/); a "
        "reference/ folder below a named directory is read only when named itself",
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        help="also write the report to DIR/report.<format> (html: only there, one "
        f"self-contained file with its figures inline; default {HTML_DIR}/); "
        "BASE NEW: DIR/diff.<format>",
    )
    p.add_argument(
        "--base", metavar="PATH", help="regression mode: the result set to compare against"
    )
    p.add_argument("--new", metavar="PATH", help="regression mode: the result set to check")
    p.add_argument(
        "--fail",
        action="append",
        default=[],
        metavar="METRIC:N%",
        help="with --base/--new: exit 1 when METRIC got significantly worse by more than N%% "
        "(throughput, accuracy, step_p50, peak_rss; repeatable)",
    )
    p.add_argument(
        "--min-effect",
        type=float,
        default=None,
        help="with --base/--new: smallest relative change called significant (default: 0.03)",
    )
    p.add_argument("--format", choices=formats.FORMATS, default="text")
    p.add_argument(
        "--target-accuracy",
        type=float,
        default=DEFAULT_TARGET,
        help=f"accuracy for the time-to-target column (default: {DEFAULT_TARGET})",
    )
    p.add_argument(
        "--sources", action="store_true", help="list the record (file:line) behind every run"
    )
    _report_flags(p)


def _report_flags(p: argparse.ArgumentParser) -> None:
    """How the tables read: what is shown, prices, the precision of decisions, the width."""
    shown = p.add_mutually_exclusive_group()
    shown.add_argument(
        "--show",
        metavar="LIST",
        help=f"after the summary, these sections (comma separated): {', '.join(summary.SECTIONS)}",
    )
    shown.add_argument(
        "--all", action="store_true", help="after the summary, every section, note and knob"
    )
    p.add_argument(
        "--price-per-hour",
        type=float,
        metavar="P",
        help="price of one worker-hour (or node-hour, --price-per node): adds cost per million "
        "samples and cost to the target accuracy (text and markdown)",
    )
    p.add_argument("--price-per", choices=["worker", "node"], default="worker")
    p.add_argument(
        "--decide-at",
        default="5%",
        help="the P at which head-to-heads read as decided: faster, slower, or equivalent "
        "within P (default: 5%%)",
    )
    p.add_argument(
        "--error-rates",
        action="store_true",
        help="add each cell's simulated error rates of the --decide-at decisions (10,000 "
        "sequences drawn from its own launches)",
    )
    p.add_argument(
        "--wide",
        action="store_true",
        help="text: every table whole on one line per row, whatever the terminal's width "
        "(default: fit the terminal, COLUMNS, or 100 columns when not a terminal)",
    )


def run(args: argparse.Namespace) -> int:
    if args.base is not None or args.new is not None:
        if args.base is None or args.new is None:
            print("error: regression mode needs both --base PATH and --new PATH", file=sys.stderr)
            return EXIT_BAD_INPUT
        if args.paths:
            print(
                f"error: give the result sets as --base/--new only, not also as paths "
                f"({' '.join(args.paths)})",
                file=sys.stderr,
            )
            return EXIT_BAD_INPUT
        return _diff(args)
    if args.fail or args.min_effect is not None:
        option = "--fail" if args.fail else "--min-effect"
        print(f"error: {option} needs --base PATH and --new PATH", file=sys.stderr)
        return EXIT_BAD_INPUT
    wrong = not_records(args.paths)  # before the note below: a mistyped path is one line
    if wrong:
        print(f"error: {wrong}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if len(args.paths) == 2:
        # Regression mode is chosen by its flags, never by how many paths are given;
        # whoever wanted the change between the two is told how to ask for it.
        print(
            "note: two paths are shown as one set of tables; for the change from one to the "
            f"other use `bench compare --base {args.paths[0]} --new {args.paths[1]}`",
            file=sys.stderr,
        )
    paths = args.paths or ["results"]
    try:
        price = (
            None if args.price_per_hour is None else cost.Price(args.price_per_hour, args.price_per)
        )
        precision = parse_precision(args.decide_at)
        show = sections_to_show(args.show, args.all)
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


def sections_to_show(names: str | None, everything: bool) -> set[str] | None:
    """The sections --show names (or every one for --all), as the comparison names them;
    None: the summary alone. InputError for a name that is none."""
    if everything:
        return set(summary.SECTIONS.values())
    if not names:
        return None
    given = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in given if n not in summary.SECTIONS]
    if unknown:
        raise InputError(
            f"--show: no section {', '.join(map(repr, unknown))}; sections are "
            f"{', '.join(summary.SECTIONS)}"
        )
    return {summary.SECTIONS[n] for n in given}


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


def _diff(args: argparse.Namespace) -> int:
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
