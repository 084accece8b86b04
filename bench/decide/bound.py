"""What it would take to settle the open head-to-heads: a lower bound in seconds.

The loop decides a pair of cells a and b only at a look, when the pair's launches
reach a count L of `rule.LOOKS`, and only if the look's half-width
t sqrt(v_a / N_a + v_b / N_b) fits within what its ratio needs
(`rule.needed_half_width`, h), with v a cell's variance of log throughput and N its
launches then. Welch's degrees of freedom are at most L - 2, so t is at least the
quantile at L - 2. Every way the pair could be decided is therefore among the whole
splits N_a + N_b = L of the looks still to come, with N no fewer than the launches made,
that meet t(L - 2) sqrt(v_a / N_a + v_b / N_b) <= h: the cheapest of them, in seconds
of launches more (each cell's seconds a launch), bounds the seconds any allocation
needs. There are at most a few hundred, so they are all tried. inf: none does.

Pairs that share a cell share launches, so k of them are decided no sooner than the
largest of their own bounds: the least for any k is the k-th smallest bound. All at
the measured ratios and spreads taken as true (a few launches measure them loosely),
so it is a bound, never a plan.
"""

from __future__ import annotations

import math

import numpy as np

from bench.decide import rule
from bench.decide.rule import Side
from bench.measure import stats

# the least t quantile at each look: Welch's degrees of freedom are at most L - 2
_T_AT = {look: stats.t_quantile(0.5 + rule.confidence() / 2, look - 2) for look in rule.LOOKS}


def seconds_more(a: Side, b: Side, precision: float, scale: float = 1.0) -> float:
    """A lower bound on the seconds of launches more that decide the pair (a, b), at its
    measured ratio and spreads; inf when no look to come could (module docstring)."""
    if min(a.n, b.n) < 2:
        return 0.0  # no spread measured yet: nothing to bound with
    d = float(np.mean(a.logs) - np.mean(b.logs)) - math.log(scale)
    h = float(rule.needed_half_width(d, precision))
    va, vb = float(np.var(a.logs, ddof=1)), float(np.var(b.logs, ddof=1))
    best = math.inf
    for look in (n for n in rule.LOOKS if n > a.n + b.n):
        na = np.arange(a.n, look - b.n + 1, dtype=np.float64)
        nb = look - na
        fits = _T_AT[look] * np.sqrt(va / na + vb / nb) <= h
        if fits.any():
            cost = a.launch_s * (na - a.n) + b.launch_s * (nb - b.n)
            best = min(best, float(cost[fits].min()))
    return best


def least_seconds(bounds: list[float]) -> list[float]:
    """From each open pair's bound, the least seconds more in which any allocation
    decides k of them, for k = 1 .. len(bounds): the k-th smallest."""
    return sorted(bounds)
