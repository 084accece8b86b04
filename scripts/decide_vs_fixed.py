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
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.analysis import decisions  # noqa: E402
from bench.analysis.frame import synced_launches  # noqa: E402
from bench.measure import sequential  # noqa: E402

PRECISION = 0.05


def settled(folder: Path) -> pd.DataFrame:
    """A row per pair: its replayed sequential outcome and its fixed-n 95% outcome."""
    df = synced_launches(folder)
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
            table = settled(folder)
            wall = folder / "wall-seconds"
            minutes = f"{int(wall.read_text()) / 60:.1f}" if wall.exists() else "?"
            counts = []
            for what in ("head to head", "efficiency"):
                part = table[table["what"] == what]
                for col in ("at the looks", "fixed-n 95%"):
                    counts.append(f"{(part[col] != sequential.UNDECIDED).sum()} of {len(part)}")
            lines.append(
                f"| {pass_dir.name} | {run} | {launches(folder)} | {minutes} | "
                + " | ".join(counts)
                + f" | {least_minutes(folder, count)} |"
            )
            detail.append(
                f"\n{pass_dir.name} {run}:\n" + table.drop(columns="what").to_string(index=False)
            )
    return "\n".join(lines) + "\n" + "\n".join(detail)


def launches(folder: Path) -> int:
    return len(synced_launches(folder))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="scripts/decide_vs_fixed.sh's folder")
    parser.add_argument(
        "--reach", type=int, default=10, help="head-to-heads for the last column (10)"
    )
    args = parser.parse_args()
    print(summary(args.out, args.reach))
    return 0


if __name__ == "__main__":
    sys.exit(main())
