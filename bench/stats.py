"""Statistics for noisy measurements: medians with bootstrap confidence intervals.

Timing on shared machines is skewed by outliers, so the centre is the median and
the interval is a percentile bootstrap of it; with fewer than 2 values there is
no interval, and the reports say so instead of inventing one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

DEFAULT_RESAMPLES = 5000


@dataclasses.dataclass(frozen=True)
class Estimate:
    value: float
    low: float | None
    high: float | None
    n: int

    def fmt(self, spec: str = ",.0f") -> str:
        if self.low is None or self.high is None:
            return f"{self.value:{spec}}"
        return f"{self.value:{spec}} [{self.low:{spec}}, {self.high:{spec}}]"


def bootstrap(
    values: ArrayLike,
    stat: Callable[..., Any] = np.median,
    *,
    confidence: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> Estimate:
    """`stat` of `values` with a percentile-bootstrap interval (None when n < 2)."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        raise ValueError("no values to estimate from")
    point = float(stat(arr))
    if arr.size < 2:
        return Estimate(point, None, None, int(arr.size))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, arr.size, size=(resamples, arr.size))
    samples = arr[idx]
    try:  # numpy reductions take axis=: one vectorised call instead of a Python loop
        stats = np.asarray(stat(samples, axis=1))
    except TypeError:
        stats = np.apply_along_axis(stat, 1, samples)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(stats, [alpha, 1 - alpha])
    return Estimate(point, float(low), float(high), int(arr.size))


def bootstrap_ratio(
    num: ArrayLike,
    den: ArrayLike,
    scale: float = 1.0,
    *,
    confidence: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> Estimate:
    """median(num) / (scale x median(den)), resampling both groups independently."""
    a = np.asarray(num, dtype=np.float64)
    b = np.asarray(den, dtype=np.float64)
    if a.size == 0 or b.size == 0:
        raise ValueError("no values to estimate from")
    point = float(np.median(a) / (scale * np.median(b)))
    if a.size < 2 and b.size < 2:
        return Estimate(point, None, None, int(min(a.size, b.size)))
    rng = np.random.default_rng(seed)
    ma = np.median(a[rng.integers(0, a.size, size=(resamples, a.size))], axis=1)
    mb = np.median(b[rng.integers(0, b.size, size=(resamples, b.size))], axis=1)
    ratios = ma / (scale * mb)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(ratios, [alpha, 1 - alpha])
    return Estimate(point, float(low), float(high), int(min(a.size, b.size)))
