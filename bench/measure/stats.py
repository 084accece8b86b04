"""Statistics for noisy measurements: medians with intervals whose coverage holds at small n.

A cell of a sweep has a handful of runs; each run's throughput is one value.
Intervals for one cell (`estimate`), and the method, by number of runs n:

- n >= 6: the exact order-statistic (binomial) interval of the median,
  [x_(k), x_(n+1-k)] with k the largest rank for which P(Binomial(n, 1/2) < k) <=
  2.5%. Distribution-free: it covers the true median with probability >= 95% for
  any continuous distribution (96.9% at n = 6, 97.9% at n = 10).
- 3 <= n <= 5: no order-statistic interval reaches 95% (at n = 5 the min-max
  covers 93.75%, at n = 3 only 75%: what a percentile bootstrap of the median
  gives). Instead a t-interval on log throughput, exact when run-to-run noise is
  log-normal (multiplicative), transformed back; it is widened where needed to
  contain the median shown.
- n < 3: "too few runs": no interval, and no verdict is drawn from it.

Each run's value already contains its within-run noise (its windows), so the
spread between runs is the whole uncertainty of a cell; within-run windows decide
when a run has measured enough (`median_interval` over its window throughputs).

Ratios of two cells (`ratio`: efficiency, head-to-head, communication share) use
Welch's t-interval on the difference of mean log throughputs, needing >= 3 runs
on each side. tests/test_stats.py checks the coverage of both by simulation.
`bench compare BASE NEW` calls a change significant with the same ratio interval.
The percentile bootstrap the coverage test shows falling short at small n lives
with that test (tests/_stats_helpers.py).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from statistics import NormalDist
from typing import TypeVar

import numpy as np
from numpy.typing import ArrayLike

CONFIDENCE = 0.95
MIN_RUNS = 3  # fewer runs give no interval and no verdict
TOO_FEW = "too few runs"
Num = TypeVar("Num", float, np.ndarray)  # one value, or one per row


@dataclasses.dataclass(frozen=True)
class Estimate:
    value: float
    low: float | None
    high: float | None
    n: int
    method: str  # order-statistic | log-t | welch-log-t | too few runs

    def interval(self, spec: str = ",.0f") -> str:
        """'[low, high] n=N', or 'too few runs (n=N)' where there is no interval."""
        if self.low is None or self.high is None:
            return f"{TOO_FEW} (n={self.n})"
        return f"[{self.low:{spec}}, {self.high:{spec}}] n={self.n}"

    def fmt(self, spec: str = ",.0f") -> str:
        return f"{self.value:{spec}} {self.interval(spec)}"


# -- exact and small-sample intervals -------------------------------------------------


@functools.lru_cache(maxsize=256)
def order_rank(n: int, confidence: float = CONFIDENCE) -> int | None:
    """Largest k with P(Binomial(n, 1/2) <= k - 1) <= (1 - confidence) / 2; None if none.

    [x_(k), x_(n+1-k)] (1-based order statistics) then covers the median with
    probability 1 - 2 P(B <= k - 1) >= confidence.
    """
    # exact in integers: P(B <= k - 1) > alpha  <=>  sum of C(n, j), j < k, > alpha 2^n,
    # each C(n, j) from the one before it (a fresh math.comb a step made a 10,000-run
    # cell cost a second)
    num, den = ((1 - confidence) / 2).as_integer_ratio()
    limit = num << n  # alpha 2^n, times den
    term, total, best = 1, 0, None  # term = C(n, k - 1)
    for k in range(1, n // 2 + 1):
        total += term
        if total * den > limit:
            break
        best = k
        term = term * (n - k + 1) // k
    return best


def median_interval(values: ArrayLike, confidence: float = CONFIDENCE) -> Estimate:
    """Median with its exact order-statistic interval (no interval when n < 6 at 95%)."""
    arr = np.sort(np.asarray(values, dtype=np.float64))
    if arr.size == 0:
        raise ValueError("no values to estimate from")
    point = float(np.median(arr))
    k = order_rank(int(arr.size), confidence)
    if k is None:
        return Estimate(point, None, None, int(arr.size), TOO_FEW)
    return Estimate(
        point, float(arr[k - 1]), float(arr[arr.size - k]), int(arr.size), "order-statistic"
    )


def t_quantile(q: float, df: float) -> float:
    """Quantile q (0.5 < q < 1) of Student's t with df >= 1 degrees of freedom.

    Uses t = sqrt(df) tan(theta), under which the distribution function is
    1/2 + c * integral_0^theta cos(phi)^(df-1) dphi: a smooth integrand (Gauss-Legendre
    is exact to rounding), solved for theta by safeguarded Newton steps.
    """
    if not 0.5 < q < 1 or df < 1:
        raise ValueError(f"t_quantile needs 0.5 < q < 1 and df >= 1, got q={q}, df={df}")
    return _t_quantile(round(q, 12), round(float(df), 9))


_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(48)


@functools.lru_cache(maxsize=4096)
def _t_quantile(q: float, df: float) -> float:
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(math.pi)
    target = (q - 0.5) / c

    def area(theta: float) -> float:
        phi = 0.5 * theta * (_GL_NODES + 1)
        return float(0.5 * theta * np.dot(_GL_WEIGHTS, np.cos(phi) ** (df - 1)))

    lo, hi = 0.0, math.pi / 2
    z = NormalDist().inv_cdf(q)
    theta = min(math.atan(z / math.sqrt(df)), hi * 0.999)
    for _ in range(100):
        f = area(theta) - target
        if abs(f) < 1e-14:
            break
        if f > 0:
            hi = theta
        else:
            lo = theta
        slope = math.cos(theta) ** (df - 1)
        step = theta - f / slope if slope > 0 else -1.0
        theta = step if lo < step < hi else 0.5 * (lo + hi)
        if hi - lo < 1e-15:
            break
    return math.sqrt(df) * math.tan(theta)


def log_t_interval(values: ArrayLike, confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """t-interval of the log-mean, transformed back; None for n < 2 or non-positive values."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size < 2 or not np.all(arr > 0):
        return None
    logs = np.log(arr)
    half = t_quantile(0.5 + confidence / 2, arr.size - 1) * float(np.std(logs, ddof=1))
    half /= math.sqrt(arr.size)
    centre = float(np.mean(logs))
    return math.exp(centre - half), math.exp(centre + half)


def estimate(values: ArrayLike, confidence: float = CONFIDENCE) -> Estimate:
    """Median of one cell's runs with the interval its run count supports (see module doc)."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        raise ValueError("no values to estimate from")
    point = float(np.median(arr))
    n = int(arr.size)
    if n < MIN_RUNS:
        return Estimate(point, None, None, n, TOO_FEW)
    if order_rank(n, confidence) is not None:
        return median_interval(arr, confidence)
    bounds = log_t_interval(arr, confidence)
    if bounds is None:
        return Estimate(point, None, None, n, TOO_FEW)
    return Estimate(point, min(bounds[0], point), max(bounds[1], point), n, "log-t")


def ratio(
    num: ArrayLike, den: ArrayLike, scale: float = 1.0, *, confidence: float = CONFIDENCE
) -> Estimate:
    """median(num) / (scale x median(den)) with Welch's t-interval on log values.

    n is the smaller group's size; either group under MIN_RUNS gives no interval.
    """
    a = np.asarray(num, dtype=np.float64)
    b = np.asarray(den, dtype=np.float64)
    if a.size == 0 or b.size == 0:
        raise ValueError("no values to estimate from")
    point = float(np.median(a) / (scale * np.median(b)))
    n = int(min(a.size, b.size))
    if n < MIN_RUNS or not (np.all(a > 0) and np.all(b > 0)):
        return Estimate(point, None, None, n, TOO_FEW)
    _, low, high = welch_log_ratio(np.log(a), np.log(b), scale, confidence)
    return Estimate(point, min(low, point), max(high, point), n, "welch-log-t")


def welch_df(va: Num, vb: Num, na: int, nb: int) -> Num:
    """Welch-Satterthwaite degrees of freedom of a difference of two means, from their
    squared standard errors va, vb over na, nb values; at least 1 (scalars or arrays)."""
    den = va**2 / (na - 1) + vb**2 / (nb - 1)
    return np.maximum((va + vb) ** 2 / np.maximum(den, 1e-300), 1.0)


def welch_log_ratio(
    la: ArrayLike, lb: ArrayLike, scale: float = 1.0, confidence: float = CONFIDENCE
) -> tuple[float, float, float]:
    """(ratio, low, high) of exp(mean la - mean lb) / scale: Welch's t-interval on the
    difference of two groups' mean logs (two values a group at least)."""
    a, b = np.asarray(la, dtype=np.float64), np.asarray(lb, dtype=np.float64)
    va, vb = float(np.var(a, ddof=1)) / a.size, float(np.var(b, ddof=1)) / b.size
    diff = float(np.mean(a) - np.mean(b)) - math.log(scale)
    se = math.sqrt(va + vb)
    if se == 0:
        return math.exp(diff), math.exp(diff), math.exp(diff)
    half = t_quantile(0.5 + confidence / 2, float(welch_df(va, vb, a.size, b.size))) * se
    return math.exp(diff), math.exp(diff - half), math.exp(diff + half)


def relative_half_width(est: Estimate) -> float | None:
    """Half the interval's width over the point value (e.g. 0.02 for +-2%); None without one."""
    if est.low is None or est.high is None or est.value == 0:
        return None
    return (est.high - est.low) / 2 / abs(est.value)
