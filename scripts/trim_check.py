#!/usr/bin/env python3
"""Welch's interval against Yuen's trimmed one for the sequential decisions: the numbers
of docs/methodology.md, "An interval that cuts slow launches, tried".

    .venv/bin/python scripts/trim_check.py

1. Simulated (bench.measure.sequential.simulate, 10,000 sequences): false "different",
   false "equivalent" and A/A pairs decided within the looks, on five launch
   distributions (those of tests/test_sequential.py, and 3% log-normal with and without
   1 launch in 6 30% slow), then A/A pairs decided by 19, 28 and 94 launches.
2. The same by 28 launches on the lever experiment's baseline cells
   (results/reference/levers-2026-12-03/baseline).
3. Replayed on the real A/A check's launches (results/reference/aa-check-2026-12-03,
   its first three passes), as the Welch loop allocated them: the A/A decisions each
   interval makes.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.analysis import decisions  # noqa: E402
from bench.analysis.frame import synced_launches  # noqa: E402
from bench.measure import sequential as sq  # noqa: E402

TRIMS = (0.0, 0.2)
PRECISION = 0.05
SEQUENCES = 10_000
REFERENCE = ROOT / "results" / "reference"


def distributions() -> dict[str, np.ndarray]:
    rng = np.random.default_rng
    return {
        "log-normal 15% (12 values)": rng(1).normal(0, 0.15, 12),
        "1 in 6 30% slow, 5% noise": np.concatenate(
            [rng(2).normal(0, 0.05, 10), rng(3).normal(-0.3, 0.05, 2)]
        ),
        "ddp lenet x2 of issue 35": np.log([11_605, 16_528, 14_341]),
        "log-normal 3%": rng(4).normal(0, 0.03, 12),
        "1 in 6 30% slow, 3% noise": np.concatenate(
            [rng(5).normal(0, 0.03, 10), np.log([0.7, 0.7])]
        ),
    }


def decided_by(logs: np.ndarray, trim: float, launches: int) -> float:
    """A/A pairs decided by the look at `launches`, drawn as `simulate` draws them."""
    pool = logs - logs.mean()
    rng = np.random.default_rng(0)
    h = sq.silverman(pool)
    side = (sq.LOOKS[-1] + 1) // 2

    def draw() -> np.ndarray:
        return rng.choice(pool, (SEQUENCES, side)) + rng.normal(0, h, (SEQUENCES, side))

    looks = tuple(n for n in sq.LOOKS if n <= launches)
    out = sq.outcomes(draw(), draw(), PRECISION, sq.confidence(), looks, trim)
    return float(np.mean(out != sq.UNDECIDED))


def main() -> int:
    print(
        "| distribution | trim | false different | false equivalent | A/A decided by 19 / 28 / 94 launches |"
    )
    print("|---|---|---|---|---|")
    for name, logs in distributions().items():
        for trim in TRIMS:
            r = sq.simulate(logs, PRECISION, SEQUENCES, trim=trim)
            by = " / ".join(f"{decided_by(logs, trim, n):.1%}" for n in (19, 28, 94))
            print(
                f"| {name} | {trim} | {r.false_different:.1%} | {r.false_equivalent:.1%} | {by} |"
            )
    print(
        "\n| lever baseline cell | launches | sd of log throughput | A/A decided by 28: Welch / trimmed |"
    )
    print("|---|---|---|---|")
    base = synced_launches(REFERENCE / "levers-2026-12-03" / "baseline")
    for (engine, workers), cell in base.groupby(["engine", "workers"]):
        logs = np.log(cell["throughput"].astype(float).to_numpy())
        by = " / ".join(f"{decided_by(logs, t, 28):.1%}" for t in TRIMS)
        print(f"| {engine} x{workers} | {logs.size} | {logs.std(ddof=1):.3f} | {by} |")
    counts = {trim: Counter() for trim in TRIMS}
    passes = sorted((REFERENCE / "aa-check-2026-12-03").glob("pass[123]/*"))  # as the docs quote
    for folder in passes:
        for _, gdf in synced_launches(folder).groupby("model"):
            ok = decisions.usable(gdf)
            sides = decisions.Sides(ok)
            for pair in decisions.pairs(ok):
                if pair.what != "head to head":
                    continue
                for trim in TRIMS:
                    found = decisions.decide(ok, pair, PRECISION, sides, trim=trim)
                    counts[trim][found.outcome] += 1
    print("\nreal A/A pairs replayed (aa-check-2026-12-03, passes 1-3):")
    for trim in TRIMS:
        print(f"  trim {trim}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts[trim].items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
