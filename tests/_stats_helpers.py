"""Statistics only the tests need: the baselines the product's intervals are checked against.

The percentile bootstrap of the median is what the coverage test in test_stats.py
shows falling short at small n (75% at n = 3), the reason the product uses order
statistics and log-t intervals instead; `order_coverage` is the exact coverage the
order-statistic interval is checked to reach.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from bench.measure import stats

DEFAULT_RESAMPLES = 5000


def order_coverage(n: int, confidence: float = stats.CONFIDENCE) -> float | None:
    """Exact coverage of the order-statistic interval at n (None where there is none)."""
    k = stats.order_rank(n, confidence)
    if k is None:
        return None
    return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n


def bootstrap(
    values: ArrayLike,
    stat: Callable[..., Any] = np.median,
    *,
    confidence: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> stats.Estimate:
    """`stat` of `values` with a percentile-bootstrap interval (None when n < 2)."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        raise ValueError("no values to estimate from")
    point = float(stat(arr))
    if arr.size < 2:
        return stats.Estimate(point, None, None, int(arr.size), "bootstrap")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, arr.size, size=(resamples, arr.size))
    samples = arr[idx]
    try:  # numpy reductions take axis=: one vectorised call instead of a Python loop
        resampled = np.asarray(stat(samples, axis=1))
    except TypeError:
        resampled = np.apply_along_axis(stat, 1, samples)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(resampled, [alpha, 1 - alpha])
    return stats.Estimate(point, float(low), float(high), int(arr.size), "bootstrap")
