"""`bench compare`: the comparison tables of result records, or the change from BASE to NEW.

This module parses and checks the arguments, then prints a replay of the same
comparison when one is kept (bench/cli/replay.py: the same records, arguments and code)
without loading pandas; else bench/cli/compare_tables.py makes the tables.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from types import ModuleType

from bench.cli import replay
from bench.cli.common import DEFAULT_TARGET, EXIT_BAD_INPUT, not_records, parse_precision
from bench.core.errors import InputError
from bench.render import choices

DESCRIPTION = (
    "Tables over every record under PATHS (results/reference/ only when named), one "
    "comparison per spec, machine, library versions and measurement protocol; or, with "
    "--base and --new, the change of each cell between two result sets."
)


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
        f"self-contained file with its figures inline; default {choices.HTML_DIR}/); "
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
    p.add_argument("--format", choices=choices.FORMATS, default="text")
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
        help=f"after the summary, these sections (comma separated): {', '.join(choices.SECTIONS)}",
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
    p.add_argument(
        "--no-replay",
        action="store_true",
        help="make the tables afresh: without it, the same records, arguments and bench "
        "code print again what they printed before, kept in $XDG_CACHE_HOME/bench/replay/",
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
        return _tables().diff(args)
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
        precision = parse_precision(args.decide_at)
        show = sections_to_show(args.show, args.all)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    # A page goes to a file, not the terminal: only what is printed is replayed.
    kept = None
    if not (args.no_replay or args.out or args.format == "html"):
        kept = replay.Replay.of("compare", vars(args), paths, choices.width(args.wide))
        if kept.play():
            return 0
    tables = _tables()
    if kept is None:
        return tables.tables(args, paths, precision, show)
    return kept.record(lambda: tables.tables(args, paths, precision, show))


def _tables() -> ModuleType:
    """bench/cli/compare_tables.py, loaded by name when tables are made, as the dispatcher
    loads a subcommand (bench/cli/__init__.py): it imports pandas, which a replay skips."""
    return importlib.import_module("bench.cli.compare_tables")


def sections_to_show(names: str | None, everything: bool) -> set[str] | None:
    """The sections --show names (or every one for --all), as the comparison names them;
    None: the summary alone. InputError for a name that is none."""
    if everything:
        return set(choices.SECTIONS.values())
    if not names:
        return None
    given = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in given if n not in choices.SECTIONS]
    if unknown:
        raise InputError(
            f"--show: no section {', '.join(map(repr, unknown))}; sections are "
            f"{', '.join(choices.SECTIONS)}"
        )
    return {choices.SECTIONS[n] for n in given}
