#!/usr/bin/env python3
"""Seconds per test file from pytest's JUnit XML, as a markdown table, slowest first.

    .venv/bin/python -m pytest --junitxml=/tmp/run.xml
    .venv/bin/python scripts/test_durations.py /tmp/run.xml
    .venv/bin/python scripts/test_durations.py /tmp/before.xml /tmp/after.xml
    .venv/bin/python scripts/test_durations.py --write tests/file_seconds.tsv \
        --waits /tmp/pytest-of-$USER/pytest-N/waits.tsv /tmp/run.xml

Each test case's `time` is its setup, call and teardown together (pytest's default
`junit_duration_report = total`), so a module-scoped fixture's launches count in the
file whose first test set it up, and a session-scoped one's in whichever file asked
first. With one report: file, tests, seconds and share of the total. With two (before,
after): both files' seconds and tests side by side, the change, and the totals; a file
present in only one report shows a dash on the other side. `--write FILE` writes one
report's seconds per file as the table tests/file_order.py orders the files by; with
`--waits` (the run's log of one process waiting on the other, whose path its summary
prints) less the time each file stood still, which is the order's cost, not the file's.
Standard library only.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass
class FileTime:
    """One test file's total seconds and how many test cases it reported."""

    seconds: float = 0.0
    tests: int = 0


def file_of(case: ET.Element) -> str:
    """The test file a <testcase> belongs to: its `file` attribute (xunit1), else its
    classname (`tests.test_x` or `tests.test_x.TestClass`) with the class dropped."""
    if case.get("file"):
        return str(case.get("file"))
    parts = (case.get("classname") or "?").split(".")
    while len(parts) > 1 and parts[-1][:1].isupper():
        parts.pop()  # a test class, not a module
    return "/".join(parts) + ".py"


def per_file(report: Path) -> dict[str, FileTime]:
    """Seconds and test count per file in one JUnit XML report."""
    out: dict[str, FileTime] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        entry = out.setdefault(file_of(case), FileTime())
        entry.seconds += float(case.get("time") or 0.0)
        entry.tests += 1
    return out


def one_table(times: dict[str, FileTime]) -> list[str]:
    """Markdown rows for one report: file, tests, seconds, share of the total."""
    total = sum(t.seconds for t in times.values()) or 1.0
    rows = ["| file | tests | seconds | share |", "|---|---:|---:|---:|"]
    for name, t in sorted(times.items(), key=lambda kv: (-kv[1].seconds, kv[0])):
        rows.append(f"| {name} | {t.tests} | {t.seconds:.1f} | {100 * t.seconds / total:.1f}% |")
    tests = sum(t.tests for t in times.values())
    rows.append(f"| **total** | {tests} | {sum(t.seconds for t in times.values()):.1f} | 100% |")
    return rows


def _cell(t: FileTime | None) -> tuple[str, str]:
    return ("-", "-") if t is None else (f"{t.seconds:.1f}", str(t.tests))


def two_tables(before: dict[str, FileTime], after: dict[str, FileTime]) -> list[str]:
    """Markdown rows comparing two reports, the files whose time changed most first."""
    rows = [
        "| file | before s | after s | change s | tests before | tests after |",
        "|---|---:|---:|---:|---:|---:|",
    ]

    def change(name: str) -> float:
        return (after[name].seconds if name in after else 0.0) - (
            before[name].seconds if name in before else 0.0
        )

    for name in sorted(set(before) | set(after), key=lambda n: (change(n), n)):
        (b_s, b_n), (a_s, a_n) = _cell(before.get(name)), _cell(after.get(name))
        rows.append(f"| {name} | {b_s} | {a_s} | {change(name):+.1f} | {b_n} | {a_n} |")
    tb, ta = (sum(t.seconds for t in d.values()) for d in (before, after))
    nb, na = (sum(t.tests for t in d.values()) for d in (before, after))
    rows.append(f"| **total** | {tb:.1f} | {ta:.1f} | {ta - tb:+.1f} | {nb} | {na} |")
    return rows


def less_waits(times: dict[str, FileTime], waits: Path) -> dict[str, FileTime]:
    """`times` with each file's logged waits (the last column of tests/conftest.py's
    waits log: the file that stood still) taken out, at least 0."""
    waited: dict[str, float] = {}
    for line in waits.read_text().splitlines():
        cells = line.split("\t")
        if len(cells) == 4 and cells[3]:
            waited[cells[3]] = waited.get(cells[3], 0.0) + float(cells[1])
    return {
        name: FileTime(max(t.seconds - waited.get(name, 0.0), 0.0), t.tests)
        for name, t in times.items()
    }


def seconds_table(times: dict[str, FileTime], source: str) -> str:
    """`file<TAB>seconds` lines, by file name (a refresh's diff shows what moved)."""
    head = f"# seconds per test file, from {source} (scripts/test_durations.py --write)\n"
    return head + "".join(f"{name}\t{times[name].seconds:.1f}\n" for name in sorted(times))


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table for one report, or the comparison of two, or write one's seconds
    (--write); 2 on a missing file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", type=Path, help="one JUnit XML, or before and after")
    parser.add_argument("--write", type=Path, metavar="FILE", help="write one report's seconds")
    parser.add_argument("--waits", type=Path, metavar="LOG", help="with --write: less these waits")
    args = parser.parse_args(argv)
    if len(args.reports) > 2 or (args.write and len(args.reports) > 1):
        parser.error("give one report, or two (before, after); --write takes one")
    if args.waits and not args.write:
        parser.error("--waits goes with --write")
    given = [*args.reports, *([args.waits] if args.waits else [])]
    missing = [str(p) for p in given if not p.is_file()]
    if missing:
        print(f"test_durations: no such report: {', '.join(missing)}", file=sys.stderr)
        return 2
    tables = [per_file(p) for p in args.reports]
    if args.write:
        times = less_waits(tables[0], args.waits) if args.waits else tables[0]
        args.write.write_text(seconds_table(times, args.reports[0].name))
        return 0
    rows = one_table(tables[0]) if len(tables) == 1 else two_tables(tables[0], tables[1])
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
