#!/usr/bin/env python3
"""Would pairing the engines' launches settle head-to-heads sooner? Replayed on records.

    .venv/bin/python scripts/paired_check.py FOLDER...

A sweep runs a repeat's engines of one (model, worker count) one after the other, so
the launches of one repeat form a block that shares the machine's phase. For every
head-to-head of each folder, the blocks where both engines have an ok launch are
replayed in repeat order, and the pair is decided at +-5% two ways on the same blocks,
at the same looks (the loop's schedule counted in launches a side: 3, 5, 7, 10, 14,
21, 32, 47) and the same confidence (alpha spent over those looks):
- unpaired: Welch's interval on each side's log throughputs, as the loop decides now
  (bench.measure.sequential.interval);
- paired: the t-interval of the per-block log ratio (bench.analysis.perfgate.paired,
  the gate's own), which cancels what a block shares and pays for it in degrees of
  freedom (n - 1 against about 2n - 2).
It prints a row per pair (a / b over its blocks, the paired sd against the unpaired,
and the blocks at which each decided) and the totals. Matching is by repeat, fixed
before any launch ran, never by outcome. In a `--decide-at` run's folder only the first
round's repeats are blocks in time: the launches the loop added later share a repeat
number across engines without running back to back.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.analysis import decisions, perfgate  # noqa: E402
from bench.analysis.frame import synced_launches  # noqa: E402
from bench.measure import sequential  # noqa: E402

PRECISION = 0.05
LOOKS = tuple((n + 1) // 2 for n in sequential.LOOKS)  # launches a side (blocks)


def blocks(ok: pd.DataFrame, pair: decisions.Pair) -> tuple[np.ndarray, np.ndarray]:
    """The log throughputs of each side over the repeats both sides have, in repeat order
    (a repeat launched twice on one side is ambiguous and left out)."""

    def by_repeat(rows: tuple[int, ...]) -> dict[int, float]:
        side = ok.loc[list(rows)]
        counts = side["repeat"].value_counts()
        return {
            int(r): math.log(float(t))
            for r, t in zip(side["repeat"], side["throughput"], strict=True)
            if pd.notna(r) and counts[r] == 1  # records without a repeat have no block
        }

    a, b = by_repeat(pair.a_rows), by_repeat(pair.b_rows)
    common = sorted(set(a) & set(b))
    return np.array([a[r] for r in common]), np.array([b[r] for r in common])


def decided_at(a: np.ndarray, b: np.ndarray, paired: bool) -> tuple[str, int]:
    """(outcome, blocks) at the first look that decides, or (undecided, all blocks)."""
    conf = sequential.confidence(sequential.ALPHA, LOOKS)
    for k in (k for k in LOOKS if k <= a.size):
        if paired:
            est = perfgate.paired(np.exp(b[:k]), np.exp(a[:k]), conf)
            low, high = est.low, est.high
        else:
            _, low, high = sequential.interval(a[:k], b[:k], 1.0, conf)
        assert low is not None and high is not None
        found = sequential.outcome(low, high, PRECISION)
        if found != sequential.UNDECIDED:
            return found, k
    return sequential.UNDECIDED, int(a.size)


def replay(folder: Path) -> pd.DataFrame:
    """A row per head-to-head of the folder with three blocks or more."""
    df = synced_launches(folder)
    rows = []
    for model, gdf in df.groupby("model", sort=True):
        ok = decisions.usable(gdf)
        for pair in decisions.pairs(ok):
            if pair.what != "head to head":
                continue
            a, b = blocks(ok, pair)
            if a.size < LOOKS[0]:
                continue
            unpaired_sd = math.sqrt(np.var(a, ddof=1) + np.var(b, ddof=1))
            rows.append(
                {
                    "folder": str(folder),
                    "model": model,
                    "pair": pair.name,
                    "workers": pair.workers,
                    "blocks": int(a.size),
                    "ratio": math.exp(float(np.mean(a - b))),
                    "sd paired/unpaired": float(np.std(a - b, ddof=1)) / unpaired_sd,
                    "unpaired": "{} at {}".format(*decided_at(a, b, paired=False)),
                    "paired": "{} at {}".format(*decided_at(a, b, paired=True)),
                }
            )
    return pd.DataFrame(rows)


def totals(table: pd.DataFrame) -> str:
    """Pairs each way decided, sooner, later; blocks summed over pairs both decided: for
    every worker count, then for all."""
    lines = []
    for workers, part in [*table.groupby("workers"), ("all", table)]:
        un = part["unpaired"].str.split(" at ", expand=True)
        pa = part["paired"].str.split(" at ", expand=True)
        both = (un[0] != sequential.UNDECIDED) & (pa[0] != sequential.UNDECIDED)
        ku, kp = un[1].astype(int), pa[1].astype(int)
        ratio = part["sd paired/unpaired"]
        where = f"x{workers}" if workers != "all" else "all"
        lines += [
            f"{where}: {len(part)} pairs; paired / unpaired sd median {ratio.median():.2f}, "
            f"below 1 in {int((ratio < 1).sum())}; decided unpaired "
            f"{int((un[0] != sequential.UNDECIDED).sum())}, paired "
            f"{int((pa[0] != sequential.UNDECIDED).sum())}",
            f"  decided both ways {int(both.sum())}: paired sooner in "
            f"{int((both & (kp < ku)).sum())}, later in {int((both & (kp > ku)).sum())}; "
            f"blocks {int(ku[both].sum())} unpaired against {int(kp[both].sum())} paired",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    args = parser.parse_args(argv)
    table = pd.concat([replay(f) for f in args.folders], ignore_index=True)
    if table.empty:
        print("no head-to-head with three blocks in these folders", file=sys.stderr)
        return 1
    with pd.option_context("display.width", 100, "display.max_colwidth", 40):
        print(table.drop(columns=["folder", "workers"]).round(3).to_string(index=False))
    print(totals(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
