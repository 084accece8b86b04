#!/usr/bin/env python3
"""The table of scripts/decide_vs_fixed.sh: pairs settled by the sequential loop and by
fixed repeats of as many launches.

    .venv/bin/python scripts/decide_vs_fixed.py results/decide-vs-fixed-DATE

Each pass folder holds `decide/` (`bench run --decide-at 5% --budget 20m`) and `fixed/`
(`bench run --repeats N`), each with the wall seconds its run took. A pair counts as
settled at +-5% two ways: replayed at the loop's looks (what `bench compare --decide-at`
prints; the only valid count for the loop, which stopped on its data), and by one
fixed-n 95% interval on all its launches (valid for the fixed sweep, which looked once).
The last column is the least minutes in which any allocation, from three launches a
cell, could have settled `--reach` head-to-heads at the run's measured ratios and
spreads (bench/measure/reach.py: a lower bound).
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.analysis import decisions  # noqa: E402
from bench.analysis.frame import synced_launches  # noqa: E402
from bench.measure import sequential  # noqa: E402

PRECISION = 0.05


def settled(df: pd.DataFrame) -> pd.DataFrame:
    """A row per pair of one run's launches: its replayed sequential outcome and its
    fixed-n 95% outcome."""
    rows = []
    for model, gdf in df.groupby("model", sort=True):
        ok = decisions.usable(gdf)
        sides = decisions.Sides(ok)
        for pair in decisions.pairs(ok):
            a, b = sides(pair.a_rows), sides(pair.b_rows)
            looks = decisions.decide(ok, pair, PRECISION, sides)
            ratio, low, high = sequential.interval(a.logs, b.logs, pair.scale, 0.95)
            rows.append(
                {
                    "model": model,
                    "pair": pair.name,
                    "what": pair.what,
                    "launches": f"{a.n} + {b.n}",
                    "at the looks": looks.outcome,
                    "fixed-n 95%": sequential.outcome(low, high, PRECISION),
                    "ratio [fixed-n 95%]": f"{ratio:.3f} [{low:.3f}, {high:.3f}]",
                }
            )
    return pd.DataFrame(rows)


def least_minutes(folder: Path, count: int) -> str:
    """The least minutes in all, from three launches a cell, in which any allocation
    settles `count` head-to-heads at the folder's measured values ("-": none could)."""
    df = synced_launches(folder)
    r = decisions.reach([g for _, g in df.groupby("model", sort=True)], PRECISION)
    if r.all_s is None or count > r.total:
        return "?"
    seconds = r.all_s[count]
    return "-" if seconds == float("inf") else f"{seconds / 60:.1f}"


def summary(out: Path, count: int = 10) -> str:
    lines = [
        "| pass | run | launches | minutes | head-to-heads settled: at the looks "
        "| fixed-n 95% | efficiencies: at the looks | fixed-n 95% "
        f"| any allocation, {count} head-to-heads: least minutes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    detail = []
    for pass_dir in sorted(out.glob("pass*")):
        for run in ("decide", "fixed"):
            folder = pass_dir / run
            if not (folder / "runs.jsonl").exists():
                continue
            table = settled(synced_launches(folder))
            wall = folder / "wall-seconds"
            minutes = f"{int(wall.read_text()) / 60:.1f}" if wall.exists() else "?"
            counts = []
            for what in ("head to head", "efficiency"):
                for col in ("at the looks", "fixed-n 95%"):
                    counts.append(_count(table, col, what))
            lines.append(
                f"| {pass_dir.name} | {run} | {launches(folder)} | {minutes} | "
                + " | ".join(counts)
                + f" | {least_minutes(folder, count)} |"
            )
            detail.append(
                f"\n{pass_dir.name} {run}:\n" + table.drop(columns="what").to_string(index=False)
            )
    return "\n".join(lines) + "\n" + "\n".join(detail)


def fixed_rounds(pass_dir: Path) -> list[tuple[int, pd.DataFrame, float]]:
    """The fixed sweep's first r rounds, for r from MIN_SIDE: (r, those launches, their
    minutes of launches). The sweep runs round by round, so r rounds are a sweep of r
    repeats. Minutes count launches only (each record's launch seconds, as the decided
    table and the reach bound do), not the harness between them. The list ends at the
    first round that is not whole: every cell has r ok launches in r rounds, or a failed
    launch left the round short."""
    fixed = synced_launches(pass_dir / "fixed")
    cell = ["engine", "model", "workers"]
    cells = fixed.groupby(cell).ngroups
    out: list[tuple[int, pd.DataFrame, float]] = []
    for r in itertools.count(sequential.MIN_SIDE):
        rounds = fixed[fixed["repeat"] < r]
        sizes = rounds.groupby(cell).size()
        if len(sizes) < cells or (sizes != r).any():
            return out
        out.append((r, rounds, float(rounds["launch_s"].sum() / 60)))
    raise AssertionError("unreachable")


def within(loop: pd.DataFrame, minutes: float) -> pd.DataFrame:
    """The loop's launches made within `minutes` of launches (record order is launch
    order)."""
    return loop[loop["launch_s"].cumsum() / 60 <= minutes + 1e-9]


def same_minutes(pass_dir: Path) -> pd.DataFrame:
    """Fixed repeats against the loop in the same minutes: for each whole count r of
    fixed rounds (`fixed_rounds`), their minutes and the head-to-heads their fixed-n 95%
    interval settles; beside them, what the loop had settled at its looks within as many
    minutes of its own launches.

    The loop's count at a cut estimates what a loop given that budget would settle, and
    is no bound either way: with less budget its give-up rule would have skipped other
    pairs, and its budget counts wall time, harness included, not launch seconds."""
    loop = synced_launches(pass_dir / "decide")
    rows = []
    for r, rounds, minutes in fixed_rounds(pass_dir):
        cut = within(loop, minutes)
        rows.append(
            {
                "fixed repeats": r,
                "minutes of launches": round(minutes, 1),
                "fixed: settled (fixed-n 95%)": _count(settled(rounds), "fixed-n 95%"),
                "loop: settled at its looks, same minutes": _count(settled(cut), "at the looks"),
                "loop launches by then": len(cut),
            }
        )
    return pd.DataFrame(rows)


def _count(table: pd.DataFrame, column: str, what: str = "head to head") -> str:
    part = table[table["what"] == what]
    return f"{(part[column] != sequential.UNDECIDED).sum()} of {len(part)}"


def launches(folder: Path) -> int:
    return len(synced_launches(folder))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="scripts/decide_vs_fixed.sh's folder")
    parser.add_argument(
        "--reach", type=int, default=10, help="head-to-heads for the last column (10)"
    )
    parser.add_argument(
        "--same-minutes",
        action="store_true",
        help="instead: each pass's fixed repeats against the loop cut at the same minutes",
    )
    args = parser.parse_args()
    if not args.same_minutes:
        print(summary(args.out, args.reach))
        return 0
    for pass_dir in sorted(args.out.glob("pass*")):
        print(f"\n{pass_dir.name}:\n" + same_minutes(pass_dir).to_markdown(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
