"""`bench export`: records in another tool's format (pytest-benchmark JSON)."""

from __future__ import annotations

import argparse
import sys

from bench import records
from bench.cli.common import EXIT_BAD_INPUT, not_records, report_skipped
from bench.render import export

DESCRIPTION = (
    "Write the training records under PATHS in another tool's format. pytest-benchmark: one "
    "benchmark per engine and worker count, grouped by model and worker count; its rounds "
    "are every run's timed steps pooled (the count of runs is in extra_info), its OPS "
    "samples/s."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="*", default=["results"], help="result files or directories")
    p.add_argument(
        "--pytest-benchmark",
        metavar="FILE",
        required=True,
        help="pytest-benchmark JSON, readable by `pytest-benchmark compare FILE`",
    )


def run(args: argparse.Namespace) -> int:
    wrong = not_records(args.paths)
    if wrong:
        print(f"error: {wrong}", file=sys.stderr)
        return EXIT_BAD_INPUT
    loaded = records.load(args.paths)
    report_skipped(loaded)
    data = export.to_pytest_benchmark(loaded.records)
    if not data["benchmarks"]:
        # a file with no benchmarks would read as an export that worked
        print(
            f"no training records under {', '.join(args.paths)}; nothing written "
            f"to {args.pytest_benchmark}",
            file=sys.stderr,
        )
        return 1
    try:
        n = export.write(data, args.pytest_benchmark)
    except OSError as exc:
        print(f"error: cannot write {args.pytest_benchmark}: {exc.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"wrote {n} benchmarks to {args.pytest_benchmark}", file=sys.stderr)
    return 0
