#!/usr/bin/env python3
"""When the sequential loop should give a pair up: the numbers of docs/methodology.md,
"Giving a pair up".

    .venv/bin/python scripts/give_up_check.py

`bench run --decide-at` stops launching a pair when `more_launches` finds no look
within reach (bench/cli/until_decided.py). At optimism z = 0 it projects at the
measured ratio and spreads; z > 0 at a ratio and spreads z standard errors more
favourable (`sequential.favourable`). A give-up never makes a decision wrong (the looks'
intervals hold under any stopping); it trades decisions for launches. For each rule,
10,000 simulated pairs (`sequential.sequences`, equal launch costs) on:

1. log-normal launches at 3%, 7% and 12% spread and launches of which one in six is
   30% slow, each at true ratios 1, 1.025 (half-way inside +-5%, the hardest), 1.05
   and 1.10;
2. the real A/A check's launches (results/reference/aa-check-2026-12-03, passes 1-5):
   each cell's launches of both labels, centred per pass, drawn as `simulate` draws.

Per rule: the pairs decided, the launches a pair took, and the launches spent on
pairs that end undecided (what a give-up saves).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.analysis.frame import synced_launches  # noqa: E402
from bench.measure import sequential as sq  # noqa: E402

PRECISION = 0.05
SEQUENCES = 10_000
RULES: dict[str, float | None] = {"z=0": 0.0, "z=0.5": 0.5, "z=1": 1.0, "z=2": 2.0, "never": None}
RATIOS = (1.0, 1.025, 1.05, 1.10)
AA = ROOT / "results" / "reference" / "aa-check-2026-12-03"
SIDE = (sq.LOOKS[-1] + 1) // 2
Draw = Callable[[np.random.Generator, tuple[int, int]], np.ndarray]  # centred log throughputs
Stats = dict[str, tuple[float, float, float]]


def spreads() -> dict[str, Draw]:
    def lognormal(sd: float) -> Draw:
        return lambda rng, shape: rng.normal(0.0, sd, shape)

    def slow(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
        return rng.normal(0.0, 0.03, shape) + np.where(rng.random(shape) < 1 / 6, math.log(0.7), 0)

    return {
        "3%": lognormal(0.03),
        "7%": lognormal(0.07),
        "12%": lognormal(0.12),
        "1 in 6 slow": slow,
    }


def run_rules(draw: Draw, shift: float, seed: int) -> Stats:
    """(decided share, mean launches, mean launches of undecided pairs) per rule, all
    rules on the same sequences."""
    rng = np.random.default_rng(seed)
    a = draw(rng, (SEQUENCES, SIDE)) + shift
    b = draw(rng, (SEQUENCES, SIDE))
    conf = sq.confidence()
    out = {}
    for name, z in RULES.items():
        result, launches = sq.sequences(a, b, PRECISION, conf, give_up=z)
        undecided = result == sq.UNDECIDED
        left = float(launches[undecided].mean()) if undecided.any() else 0.0
        out[name] = (float(np.mean(~undecided)), float(launches.mean()), left)
    return out


def row(label: str, stats: Stats) -> str:
    cells = [f"{d:.0%} / {n:.0f} / {left:.0f}" for d, n, left in stats.values()]
    return f"| {label} | " + " | ".join(cells) + " |"


def header(first: str) -> list[str]:
    return [
        f"| {first} | " + " | ".join(RULES) + " |",
        "|---|" + "---|" * len(RULES),
    ]


def smoothed(pool: np.ndarray) -> Draw:
    """Draws as `sequential.simulate` makes them: a launch plus Silverman's noise."""
    h = sq.silverman(pool)
    return lambda rng, shape: rng.choice(pool, shape) + rng.normal(0.0, h, shape)


def aa_pools() -> dict[str, np.ndarray]:
    """Each A/A cell's launches over the passes, both labels, centred per pass."""
    pools: dict[str, list[float]] = {}
    for folder in sorted(AA.glob("pass[1-5]/*")):  # the passes the docs quote
        df = synced_launches(folder)
        for (engine, model, workers), cell in df.groupby(["engine_name", "model", "workers"]):
            logs = np.log(cell["throughput"].to_numpy(dtype=np.float64))
            pools.setdefault(f"{engine} {model} x{workers}", []).extend(logs - logs.mean())
    return {k: np.asarray(v) for k, v in sorted(pools.items())}


def main() -> None:
    print(
        "decided / mean launches / mean launches of the pairs left undecided, "
        f"{SEQUENCES:,} pairs a cell, +-{PRECISION:.0%}\n"
    )
    print("\n".join(header("launches, true ratio")))
    for i, (name, draw) in enumerate(spreads().items()):
        for j, ratio in enumerate(RATIOS):
            print(
                row(f"{name}, {ratio:g}", run_rules(draw, math.log(ratio), 10 * i + j)), flush=True
            )
    print("\nA/A, drawn from the real A/A check's launches (passes 1-5)\n")
    print("\n".join(header("cell (launches)")))
    for k, (cell, pool) in enumerate(aa_pools().items()):
        print(row(f"{cell} ({pool.size})", run_rules(smoothed(pool), 0.0, 100 + k)), flush=True)


if __name__ == "__main__":
    main()
