#!/usr/bin/env python3
"""Alpha spent unevenly over the looks, tried on the committed loop sweeps.

    .venv/bin/python scripts/spending_check.py results/reference/decide-vs-fixed-*/pass*
    .venv/bin/python scripts/spending_check.py --simulate

At the same minutes, fixed repeats at one fixed-n 95% interval settle more head-to-heads
early on than the loop at its looks (scripts/decide_vs_fixed.py --same-minutes): each of
the loop's 8 looks is at 1 - 0.05 / 8 = 99.4%, and at three launches a side Student's t
at that level is about twice its 95% value. Any split of alpha over the looks that sums
to 0.05 keeps the loop's guarantee (the Bonferroni bound of bench/measure/sequential.py
holds for any weights), so spending more at the first looks could settle the pairs
that differ a lot sooner, at the cost of wider late looks for the close ones.

This replays each pass's loop launches, in their order, under each split: the
head-to-heads settled by the launches made within the minutes of r fixed rounds (the
fixed sweep's own cut, as in --same-minutes) and by the whole run. A replay keeps the
loop's launches, which it chose under the even split; a loop run under another split
would have moved launches off the pairs settled sooner.

The last column is not a split: every look at Pocock's constant, the level at which the
looks' intervals, correlated as they are, miss together with chance exactly alpha in
the normal model when a pair's information grows in proportion to its launches
(Bonferroni's sum is a bound, loose for looks this close, but it holds whatever the
split of launches between a pair's sides, and this does not).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats  # scikit-learn's dependency: always installed

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))  # its sibling decide_vs_fixed.py

import decide_vs_fixed  # noqa: E402

from bench.analysis import decisions  # noqa: E402
from bench.analysis.frame import synced_launches  # noqa: E402
from bench.measure import sequential  # noqa: E402

PRECISION = 0.05


def splits() -> dict[str, list[float]]:
    """Shares of alpha at each look: the splits sum to 1; Pocock's constant more, as the
    looks' correlation allows."""
    k = len(sequential.LOOKS)
    out = {"even (the loop's)": [1 / k] * k, "half at the first": [0.5] + [0.5 / (k - 1)] * (k - 1)}
    for q in (0.7, 0.5):
        w = np.array([q**i for i in range(k)])
        out[f"falling by {q}"] = list(w / w.sum())
    out["Pocock's constant"] = [(1 - pocock_level()) / sequential.ALPHA] * k
    return out


def pocock_level(paths: int = 400_000, looks: tuple[int, ...] = sequential.LOOKS) -> float:
    """Each look's confidence that makes the chance of any look's interval missing
    exactly ALPHA, not at most, for normal statistics whose information grows in
    proportion to the pair's launches (a Brownian motion seen at LOOKS; Pocock's
    constant boundary): the looks are correlated, sqrt(L_i / L_j), so Bonferroni's
    union bound is loose. By simulation, seeded; the normal model, not Student's t at
    few launches."""
    at = np.array(looks, dtype=float)
    steps = np.sqrt(np.diff(at, prepend=0.0))
    walk = np.cumsum(np.random.default_rng(0).standard_normal((paths, at.size)) * steps, axis=1)
    c = float(np.quantile(np.abs(walk / np.sqrt(at)).max(axis=1), 1 - sequential.ALPHA))
    return 1 - math.erfc(c / math.sqrt(2))  # two-sided: 1 - 2 (1 - Phi(c))


def aa_false_different(
    level: float, share_a: float, tails: str = "normal", n: int = 20_000
) -> float:
    """Simulated A/A pairs taken to the last look, a pair's launches split share_a to
    side a at every look (MIN_SIDE a side at least), each look's Welch interval at
    `level`: the share of pairs that any look calls different. `tails`: "normal", or
    "t3" for Student's t with 3 degrees of freedom (heavy-tailed launches). Seeded."""
    rng = np.random.default_rng(1)
    on_a = [max(sequential.MIN_SIDE, round(share_a * n_l)) for n_l in sequential.LOOKS]
    split = [(na, n_l - na) for na, n_l in zip(on_a, sequential.LOOKS, strict=True)]
    width = (max(a for a, _ in split), max(b for _, b in split))
    draw = rng.standard_normal if tails == "normal" else lambda size: rng.standard_t(3, size)
    a, b = draw((n, width[0])), draw((n, width[1]))
    wrong = np.zeros(n, dtype=bool)
    for na, nb in split:
        if nb < sequential.MIN_SIDE:
            continue
        va, vb = a[:, :na].var(axis=1, ddof=1) / na, b[:, :nb].var(axis=1, ddof=1) / nb
        df = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))
        t = scipy_stats.t.ppf(0.5 + level / 2, df)  # vectorised, for 20,000 pairs a look
        wrong |= np.abs(a[:, :na].mean(axis=1) - b[:, :nb].mean(axis=1)) > t * np.sqrt(va + vb)
    return float(wrong.mean())


def simulated() -> pd.DataFrame:
    """False "different" of A/A pairs run to the last look, Bonferroni's level against
    Pocock's, at the even split of launches and at the uneven ones shared cells give."""
    levels = {"Bonferroni": sequential.confidence(), "Pocock": pocock_level()}
    rows = []
    for tails in ("normal", "t3"):
        for share in (0.5, 0.3, 0.19):
            row: dict[str, object] = {"launches": tails, "share of side a": share}
            for name, level in levels.items():
                row[f"{name} ({level:.2%} a look)"] = (
                    f"{aa_false_different(level, share, tails):.1%}"
                )
            rows.append(row)
    return pd.DataFrame(rows)


def first_deciding(
    ok: pd.DataFrame, pair: decisions.Pair, sides: decisions.Sides, shares: list[float]
) -> str:
    """The pair's outcome at the first look that decides it, each look at its own share
    of alpha (a one-look `decide` per look)."""
    for look, share in zip(sequential.LOOKS, shares, strict=True):
        alpha = share * sequential.ALPHA
        d = decisions.decide(ok, pair, PRECISION, sides, alpha=alpha, looks=(look,))
        if d.outcome != sequential.UNDECIDED:
            return d.outcome
    return sequential.UNDECIDED


def settled(df: pd.DataFrame, shares: list[float]) -> int:
    count = 0
    for _, g in df.groupby("model", sort=True):
        ok = decisions.usable(g)
        sides = decisions.Sides(ok)
        for pair in decisions.pairs(ok):
            if pair.what == "head to head":
                count += first_deciding(ok, pair, sides, shares) != sequential.UNDECIDED
    return count


def table(pass_dir: Path) -> pd.DataFrame:
    loop = synced_launches(pass_dir / "decide")
    cuts = [
        (f"{r} fixed rounds", minutes) for r, _, minutes in decide_vs_fixed.fixed_rounds(pass_dir)
    ]
    cuts.append(("the whole run", float(loop["launch_s"].sum() / 60)))
    rules = splits()  # once: Pocock's level is a simulation
    rows = []
    for name, minutes in cuts:
        row: dict[str, object] = {"cut": name, "minutes of launches": round(minutes, 1)}
        cut = decide_vs_fixed.within(loop, minutes)
        for split, shares in rules.items():
            row[split] = settled(cut, shares)
        rows.append(row)
    return pd.DataFrame(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "passes", nargs="*", type=Path, help="pass folders of scripts/decide_vs_fixed.sh"
    )
    parser.add_argument(
        "--simulate",
        action="store_true",
        help="instead: simulated A/A false 'different' at Bonferroni's and Pocock's levels",
    )
    args = parser.parse_args()
    if args.simulate:
        print(simulated().to_markdown(index=False))
        return 0
    if not args.passes:
        parser.error("name the pass folders to replay (or --simulate)")
    print("head-to-heads of 12 the loop's launches settle, alpha split over the looks as named")
    for pass_dir in args.passes:
        print(f"\n{pass_dir}:\n" + table(pass_dir).to_markdown(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
