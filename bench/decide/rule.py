"""The sequential rule: launches added to a head-to-head until its ratio is settled.

A head-to-head is the ratio of two cells' throughputs (or a cell's efficiency against
its 1-worker cell). The unit of replication is the launch: inside one launch, windows
agree to about 1%, while launches differ by 5-15% (docs/methodology.md), so more
windows do not settle anything and more launches do.

Decided means, at precision P:
- "different": the ratio's interval excludes 1 (one side is faster);
- "equivalent": the interval lies inside [1 - P, 1 + P].

The number of launches depends on the data (the loop stops when a pair is decided), so
a fixed-n interval would be too narrow: looking after every launch and stopping at the
first interval that excludes 1 calls an A/A pair "different" far more often than 5%.
The intervals here hold at every look at once by dividing alpha over a fixed schedule
of looks (Bonferroni): the pair is looked at only when its launch count reaches
`LOOKS[k]` (a geometric schedule), each look at confidence 1 - alpha / len(LOOKS). The
chance that any look's interval misses the true ratio is then at most alpha, whatever
the stopping rule and the allocation, so a wrong "different" or a wrong "equivalent"
happens in at most alpha of the pairs. The intervals are Welch's on log throughput
(bench/measure/stats.py), as for a fixed number of repeats. Why these choices and not
others (trimmed means, Pocock's constant, front-loaded looks): docs/findings.md.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from bench.measure import stats
from bench.measure.stats import Num

ALPHA = 0.05
# The pair's total launches at which it is looked at: growth by half, from three a side.
LOOKS = (6, 9, 13, 19, 28, 42, 63, 94)
MIN_SIDE = stats.MIN_RUNS  # Welch's interval needs this many launches on each side
# The loop gives a pair up only when, at a ratio and spreads this many standard errors
# more favourable than measured, not even the last look would decide it. At 0 (the
# measured values) it gave up on a 7%-spread A/A pair at a few launches a side and
# decided 2% of them, against 53% at 1 or never giving up; at 1 it still stops a
# 12%-spread A/A pair, which no look can decide, at 39 launches instead of 94
# (docs/findings.md, "Giving a pair up").
GIVE_UP_Z = 1.0
DIFFERENT, EQUIVALENT, UNDECIDED = "different", "equivalent", "undecided"
# How a pair's launches are read: at the loop's looks (some were launched by
# `bench run --decide-at`, which stopped on their data), or all at once with one 95%
# look (fixed repeats, whose number nothing chose from the data).
AT_LOOKS, ONE_LOOK = "at the looks of --decide-at", "one look at 95%"


@dataclasses.dataclass(frozen=True)
class Side:
    """One cell of a pair: its launches' log throughputs, in launch order, and the seconds
    one more launch of it costs."""

    logs: tuple[float, ...]
    launch_s: float

    @property
    def n(self) -> int:
        return len(self.logs)


@dataclasses.dataclass(frozen=True)
class Decision:
    outcome: str  # DIFFERENT | EQUIVALENT | UNDECIDED
    ratio: float  # exp(mean log a - mean log b - log scale) at the deciding look
    low: float | None
    high: float | None
    look: int  # looks taken (0: none yet)
    launches: int  # the pair's launches when decided, or all of them so far
    confidence: float
    reading: str = AT_LOOKS  # AT_LOOKS or ONE_LOOK


def confidence() -> float:
    """Each look's confidence: alpha spread evenly over the looks."""
    return 1 - ALPHA / len(LOOKS)


def outcome(low: float, high: float, precision: float) -> str:
    if high < 1 or low > 1:
        return DIFFERENT
    if 1 - precision <= low and high <= 1 + precision:
        return EQUIVALENT
    return UNDECIDED


def decide(
    a: Side, b: Side, order: Sequence[str], precision: float, scale: float = 1.0
) -> Decision:
    """The pair's decision, replayed look by look in launch order.

    `order` names the side of each launch ("a" or "b") as they happened, so that the
    looks see exactly the data they saw when the loop took them; the first look that
    decides settles the pair. Undecided: the latest look's interval, or all launches'
    when no look had three launches a side."""
    conf = confidence()
    na = nb = 0
    last: Decision | None = None
    look = 0
    for total, side in enumerate(order, start=1):
        na, nb = na + (side == "a"), nb + (side == "b")
        if total not in LOOKS:
            continue
        look += 1
        if min(na, nb) < MIN_SIDE:
            continue
        r, lo, hi = stats.welch_log_ratio(a.logs[:na], b.logs[:nb], scale, conf)
        last = Decision(outcome(lo, hi, precision), r, lo, hi, look, total, conf)
        if last.outcome != UNDECIDED:
            return last
    if last is not None:
        return dataclasses.replace(last, look=look, launches=a.n + b.n)
    ratio = math.exp(float(np.mean(a.logs) - np.mean(b.logs)) - math.log(scale))
    return Decision(UNDECIDED, ratio, None, None, look, a.n + b.n, conf)


def needed_half_width(log_ratio: Num, precision: float) -> Num:
    """The half-width (in log ratio) at which a pair at this estimate would be decided:
    the easier of excluding 1 and fitting inside [1 - P, 1 + P]. The second is
    asymmetric in logs (log(1 + P) < -log(1 - P)): the room is to the nearer edge."""
    room = np.minimum(math.log(1 + precision) - log_ratio, log_ratio - math.log(1 - precision))
    return np.maximum(np.abs(log_ratio), room)


def widest_inside(precision: float) -> float:
    """The log ratio whose room inside [1 - P, 1 + P] is widest: half-way between the
    edges in logs, log(1 - P^2) / 2, a little below 1."""
    return math.log(1 - precision**2) / 2


def next_side(a: Side, b: Side) -> str:
    """The side to launch next: the one behind on n x sqrt(launch seconds).

    That keeps n_a / n_b = sqrt(c_b / c_a), the allocation that narrows the interval
    most per second when both sides vary alike. The measured variances are not used:
    a side that happened to look steady would starve at three launches with its
    variance underestimated, and Welch's interval would be too narrow (an A/A pair then
    reads "different" in 7% of simulated sequences instead of at most 5%)."""
    return "a" if a.n * math.sqrt(a.launch_s) <= b.n * math.sqrt(b.launch_s) else "b"


def more_launches(
    a: Side, b: Side, precision: float, scale: float = 1.0, optimism: float = 0.0
) -> tuple[int, int] | None:
    """Launches to add to (a, b) for the pair to be decided at a later look, were the
    measured spreads and ratio the true ones: the first look after the current
    launches whose projected interval is narrow enough, with the launches allocated as
    `next_side` does. None when not even the last look would do (no allocation could).

    `optimism` z > 0 projects instead at the most favourable ratio within z standard
    errors of the measured one and at each side's spread at the low end of its own
    one-sided interval z normal deviates out (`favourable`): the give-up rule of the
    loop (`GIVE_UP_Z`), where the measured values of a few launches are no truth."""
    if min(a.n, b.n) < 2:
        return None
    sa = float(np.var(a.logs, ddof=1)) / a.n  # squared standard errors
    sb = float(np.var(b.logs, ddof=1)) / b.n
    d = float(np.mean(a.logs) - np.mean(b.logs)) - math.log(scale)
    target, sa, sb = (float(x) for x in favourable(d, sa, sb, a.n, b.n, precision, optimism))
    conf = confidence()
    va, vb, na, nb = a.n * sa, b.n * sb, a.n, b.n
    for look in (n for n in LOOKS if n > a.n + b.n):
        while na + nb < look:
            ahead = na * math.sqrt(a.launch_s) > nb * math.sqrt(b.launch_s)
            na, nb = (na, nb + 1) if ahead else (na + 1, nb)
        sa, sb = va / na, vb / nb
        df = float(stats.welch_df(sa, sb, na, nb)) if sa + sb > 0 else 1.0
        if stats.t_quantile(0.5 + conf / 2, df) * math.sqrt(sa + sb) <= target:
            return na - a.n, nb - b.n
    return None


def seconds(need: tuple[int, int], a: Side, b: Side) -> float:
    """What `need` more launches a side (from `more_launches`) cost at each side's
    launch seconds."""
    return need[0] * a.launch_s + need[1] * b.launch_s


def favourable(
    d: Num, sa: Num, sb: Num, na: int, nb: int, precision: float, z: float
) -> tuple[Num, Num, Num]:
    """(half-width needed, sa, sb) for the projection of a pair whose log ratio reads d,
    with squared standard errors sa and sb from na and nb launches a side, taken z
    standard errors towards what decides soonest (z = 0: the measured values). Scalars
    or one row per pair.

    The ratio: the one within d +- z sqrt(sa + sb) that needs the widest interval to be
    decided (`needed_half_width` is largest either at an end or, where the range holds
    it, at `widest_inside`: the larger of |d|, convex, and the room inside the
    precision, a tent peaking there).
    Each spread: its variance times k / (chi-square's upper z quantile at k = n - 1
    degrees of freedom), the low end of its one-sided interval (Wilson and Hilferty's
    approximation: within 1% of the exact quantile from k = 2 at z = 1)."""
    if z <= 0:
        return needed_half_width(d, precision), sa, sb
    se = np.sqrt(sa + sb)
    lo, hi = d - z * se, d + z * se
    ends = np.maximum(needed_half_width(lo, precision), needed_half_width(hi, precision))
    inside = np.clip(widest_inside(precision), lo, hi)
    target = np.maximum(ends, needed_half_width(inside, precision))
    return target, sa * _low_variance(na - 1, z), sb * _low_variance(nb - 1, z)


def _low_variance(k: int, z: float) -> float:
    """k / chi-square's upper quantile z normal deviates out, at k degrees of freedom."""
    c = 2 / (9 * k)
    return (1 - c + z * math.sqrt(c)) ** -3.0
