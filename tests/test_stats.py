from __future__ import annotations

import numpy as np
import pytest

from bench import stats


def test_single_value_has_no_interval() -> None:
    est = stats.bootstrap([5.0])
    assert (est.value, est.low, est.high, est.n) == (5.0, None, None, 1)


def test_constant_values_have_a_degenerate_interval() -> None:
    est = stats.bootstrap([3.0] * 7)
    assert est.value == est.low == est.high == 3.0


def test_interval_brackets_the_median_and_narrows_with_n() -> None:
    rng = np.random.default_rng(1)
    small = stats.bootstrap(rng.normal(100, 10, 8))
    large = stats.bootstrap(rng.normal(100, 10, 400))
    for est in (small, large):
        assert est.low is not None and est.high is not None
        assert est.low <= est.value <= est.high
    assert (large.high - large.low) < (small.high - small.low)  # type: ignore[operator]
    assert large.low < 100 < large.high  # type: ignore[operator]


def test_known_interval_for_two_values() -> None:
    # resampling two values gives medians 1, 1.5 or 2: the 95% interval spans [1, 2]
    est = stats.bootstrap([1.0, 2.0])
    assert (est.low, est.high) == (1.0, 2.0)


def test_ratio_point_and_interval() -> None:
    est = stats.bootstrap_ratio([90.0, 100.0, 110.0], [50.0, 50.0, 50.0], scale=2.0)
    assert est.value == pytest.approx(1.0)
    assert est.low == pytest.approx(0.9) and est.high == pytest.approx(1.1)


def test_empty_is_an_error() -> None:
    with pytest.raises(ValueError, match="no values"):
        stats.bootstrap([])
