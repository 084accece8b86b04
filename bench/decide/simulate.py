"""Error rates of the sequential rule on a cell's own launches, by simulation.

`bench compare --error-rates` shows, for each cell, how often the rule of
bench/decide/rule.py would call an A/A pair drawn from that cell's launches
"different", and a pair whose true ratio is exactly 1 + P "equivalent": both at most
alpha by design, checked here on launch distributions that are not log-normal.
Thousands of sequences at once: every row of `a` and `b` is one pair's launches.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import numpy as np

from bench.decide import rule
from bench.decide.rule import DIFFERENT, EQUIVALENT, MIN_SIDE, UNDECIDED
from bench.measure import stats


@dataclasses.dataclass(frozen=True)
class ErrorRates:
    sequences: int
    false_different: float  # an A/A pair called different
    false_equivalent: float  # a pair whose true ratio is 1 + P called equivalent
    aa_decided: float  # share of A/A pairs decided at all (as equivalent, rightly)


def simulate(
    logs: Sequence[float] | np.ndarray, precision: float, sequences: int = 10_000, seed: int = 0
) -> ErrorRates:
    """Error rates of the sequential decision on one cell's measured launch distribution.

    A/A: both sides draw from the same launches, so any "different" is false. Boundary:
    one side shifted by log(1 + P), the true ratio exactly at the edge of equivalence,
    where a false "equivalent" is likeliest. A draw is a measured launch plus normal noise
    of Silverman's bandwidth (a smoothed bootstrap: a finite pool alone repeats values,
    and a side of three equal draws has no variance, which no real launches have), so
    the skew and outliers of real launches are kept."""
    pool = np.asarray(logs, dtype=np.float64) - float(np.mean(logs))
    if pool.size < MIN_SIDE:
        raise ValueError(f"simulating needs {MIN_SIDE} launches or more, got {pool.size}")
    rng = np.random.default_rng(seed)
    h = silverman(pool)
    side = (rule.LOOKS[-1] + 1) // 2

    def draws(shift: float) -> np.ndarray:
        return rng.choice(pool, (sequences, side)) + rng.normal(0.0, h, (sequences, side)) + shift

    aa = outcomes(draws(0.0), draws(0.0), precision)
    edge = outcomes(draws(math.log(1 + precision)), draws(0.0), precision)
    return ErrorRates(
        sequences,
        float(np.mean(aa == DIFFERENT)),
        float(np.mean(edge == EQUIVALENT)),
        float(np.mean(aa != UNDECIDED)),
    )


def outcomes(a: np.ndarray, b: np.ndarray, precision: float) -> np.ndarray:
    """The sequential outcome of many pairs at once: row i of `a` and `b` are the
    launches of pair i in the order they come. With equal launch costs
    `rule.next_side` alternates from three a side, so at N launches side a has
    ceil(N/2) and b floor(N/2); each pair is settled at its first deciding look, as
    `rule.decide` settles it."""
    result = np.full(a.shape[0], UNDECIDED, dtype=object)
    open_ = np.ones(a.shape[0], dtype=bool)
    conf = rule.confidence()
    for total in rule.LOOKS:
        na, nb = (total + 1) // 2, total // 2
        if na > a.shape[1] or nb > b.shape[1]:
            break
        if min(na, nb) < MIN_SIDE:
            continue
        diff = a[:, :na].mean(axis=1) - b[:, :nb].mean(axis=1)
        va = a[:, :na].var(axis=1, ddof=1) / na
        vb = b[:, :nb].var(axis=1, ddof=1) / nb
        different, equivalent = _settled(diff, va, vb, (na, nb), precision, conf)
        result[open_ & different] = DIFFERENT
        result[open_ & equivalent] = EQUIVALENT
        open_ &= ~(different | equivalent)
    return result


def _settled(
    diff: np.ndarray,
    va: np.ndarray,
    vb: np.ndarray,
    sides: tuple[int, int],
    precision: float,
    conf: float,
) -> tuple[np.ndarray, np.ndarray]:
    """(different, equivalent) per row at a look, as `rule.decide` reads it."""

    def different(half: np.ndarray) -> np.ndarray:
        return (np.exp(diff + half) < 1) | (np.exp(diff - half) > 1)

    def equivalent(half: np.ndarray) -> np.ndarray:
        low, high = np.exp(diff - half), np.exp(diff + half)
        return (low >= 1 - precision) & (high <= 1 + precision)

    half = _half_widths(va, vb, sides, conf, (different, equivalent))
    is_different = different(half)
    return is_different, ~is_different & equivalent(half)


def _half_widths(
    va: np.ndarray,
    vb: np.ndarray,
    sides: tuple[int, int],
    conf: float,
    tests: Sequence[Callable[[np.ndarray], np.ndarray]],
) -> np.ndarray:
    """Welch's half-width in log ratio per row, from squared standard errors va and vb
    of the sides' launches, exact wherever it matters to `tests` (each true for a
    half-width and every narrower one). Quantiles at the degrees of freedom rounded
    down and up to a tenth bound the exact one; a row whose tests read the same at both
    keeps the wider, and only the others cost an exact quantile, so thousands of rows
    are decided as `rule.decide` decides each."""
    df = stats.welch_df(va, vb, *sides)
    se = np.sqrt(va + vb)

    def quantiles(at: np.ndarray) -> np.ndarray:
        q = {g: stats.t_quantile(0.5 + conf / 2, g) for g in np.unique(at)}
        return np.array([q[g] for g in at], dtype=np.float64)

    wide = quantiles(np.maximum(np.floor(df * 10) / 10, 1.0)) * se
    narrow = quantiles(np.ceil(df * 10) / 10) * se
    unsure = np.zeros(df.shape, dtype=bool)
    for test in tests:
        unsure |= test(wide) != test(narrow)
    half = wide.copy()
    half[unsure] = quantiles(df[unsure]) * se[unsure]
    return half


def silverman(values: np.ndarray) -> float:
    """Silverman's rule-of-thumb bandwidth: 0.9 min(sd, IQR / 1.34) n^(-1/5)."""
    sd = float(np.std(values, ddof=1))
    iqr = float(np.subtract(*np.percentile(values, [75, 25])))
    spread = min(sd, iqr / 1.34) if iqr > 0 else sd
    return 0.9 * spread * len(values) ** -0.2
