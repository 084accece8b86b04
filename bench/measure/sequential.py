"""Sequential head-to-head decisions: launches added until a ratio is settled.

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
The intervals here hold at every look at once by spending alpha over a fixed schedule
of looks (Bonferroni): the pair is looked at only when its launch count reaches
`LOOKS[k]` (a geometric schedule), each look at confidence 1 - alpha / len(LOOKS). The
chance that any look's interval misses the true ratio is then at most alpha, whatever
the stopping rule and the allocation, so a wrong "different" or a wrong "equivalent"
happens in at most alpha of the pairs.

The intervals are Welch's on log throughput, as for the fixed-repeat head-to-head
(bench/measure/stats.py). `trim` > 0 gives Yuen's instead: Welch's on each side's
trimmed mean with its winsorized variance, so that one slow launch in 1 / trim is cut
rather than setting the width of every look. It is not the default: on this suite's
launches it decided more pairs only where slow launches were rare outliers, and fewer
where launches were clean, as cutting costs degrees of freedom at a few launches a side
(docs/methodology.md, "An interval that cuts slow launches, tried"). `simulate` checks
the error rates of either on launch distributions that are not log-normal.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

from bench.measure import stats

ALPHA = 0.05
# The pair's total launches at which it is looked at: growth by half, from three a side.
LOOKS = (6, 9, 13, 19, 28, 42, 63, 94)
MIN_SIDE = stats.MIN_RUNS  # Welch's interval needs this many launches on each side
# The share of a side's launches cut from each end before its mean (Yuen's trimmed
# interval; 0.2 cuts one in five). 0: Welch's, measured the better default here.
TRIM = 0.0
# The loop gives a pair up only when, at a ratio and spreads this many standard errors
# more favourable than measured, not even the last look would decide it. At 0 (the
# measured values) it gave up on a 7%-spread A/A pair at a few launches a side and
# decided 2% of them, against 53% at 1 or never giving up; at 1 it still stops a
# 12%-spread A/A pair, which no look can decide, at 39 launches instead of 94
# (scripts/give_up_check.py, docs/methodology.md "Giving a pair up").
GIVE_UP_Z = 1.0
DIFFERENT, EQUIVALENT, UNDECIDED = "different", "equivalent", "undecided"
Num = TypeVar("Num", float, np.ndarray)  # one pair, or one row per pair


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
    ratio: float  # exp(mean log a - mean log b - log scale) at the deciding look (or trimmed)
    low: float | None
    high: float | None
    look: int  # looks taken (0: none yet)
    launches: int  # the pair's launches when decided, or all of them so far
    confidence: float


def confidence(alpha: float = ALPHA, looks: Sequence[int] = LOOKS) -> float:
    return 1 - alpha / len(looks)


def trimmed(values: Sequence[float] | np.ndarray, trim: float = TRIM) -> tuple[float, float, int]:
    """(trimmed mean, squared standard error, h) of one side, as Yuen's interval takes
    them: g = floor(trim n) values cut from each end, h = n - 2g kept, the standard error
    from the winsorized variance (the cut values set to the nearest kept one). With g = 0
    (fewer than 1 / trim launches) it is the mean and s^2 / n: Welch's side."""
    mean, se2, h = _trimmed_rows(np.asarray(values, dtype=np.float64)[None, :], trim)
    return float(mean[0]), float(se2[0]), h


def trimmed_mean(values: Sequence[float], trim: float = TRIM) -> float:
    """The mean of the launches a side's trimmed mean keeps: no spread, so that a side of
    one launch (a pair with no look yet) has a centre without a variance of one value."""
    s = sorted(values)
    g = (len(s) - kept(len(s), trim)) // 2
    return float(np.mean(s[g : len(s) - g]))


def kept(n: int, trim: float = TRIM) -> int:
    """h: the launches of n that a side's trimmed mean keeps (floor(trim n) cut from each end)."""
    return n - 2 * math.floor(trim * n)


def _trimmed_rows(x: np.ndarray, trim: float) -> tuple[np.ndarray, np.ndarray, int]:
    """`trimmed` for each row of x at once."""
    n = x.shape[1]
    h = kept(n, trim)
    g = (n - h) // 2
    s = np.sort(x, axis=1)
    winsorized = np.clip(s, s[:, [g]], s[:, [n - g - 1]])
    return s[:, g : n - g].mean(axis=1), (n - 1) * winsorized.var(axis=1, ddof=1) / (h * (h - 1)), h


def interval(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    scale: float = 1.0,
    conf: float = 0.95,
    trim: float = TRIM,
) -> tuple[float, float, float]:
    """(ratio, low, high) of exp(mean a - mean b) / scale, Welch's interval on the logs;
    with trim > 0, Yuen's: the trimmed means (Welch's still where too few launches to cut)."""
    ma, va, ha = trimmed(a, trim)
    mb, vb, hb = trimmed(b, trim)
    diff = ma - mb - math.log(scale)
    se = math.sqrt(va + vb)
    if se == 0:
        return math.exp(diff), math.exp(diff), math.exp(diff)
    df = (va + vb) ** 2 / (va**2 / (ha - 1) + vb**2 / (hb - 1))
    half = stats.t_quantile(0.5 + conf / 2, max(df, 1.0)) * se
    return math.exp(diff), math.exp(diff - half), math.exp(diff + half)


def outcome(low: float, high: float, precision: float) -> str:
    if high < 1 or low > 1:
        return DIFFERENT
    if 1 - precision <= low and high <= 1 + precision:
        return EQUIVALENT
    return UNDECIDED


def decide(
    a: Side,
    b: Side,
    order: Sequence[str],
    precision: float,
    scale: float = 1.0,
    alpha: float = ALPHA,
    looks: Sequence[int] = LOOKS,
    trim: float = TRIM,
) -> Decision:
    """The pair's decision, replayed look by look in launch order.

    `order` names the side of each launch ("a" or "b") as they happened, so that the
    looks see exactly the data they saw when the loop took them; the first look that
    decides settles the pair. Undecided: the latest look's interval, or all launches'
    when no look had three launches a side."""
    conf = confidence(alpha, looks)
    na = nb = 0
    last: Decision | None = None
    look = 0
    for total, side in enumerate(order, start=1):
        na, nb = na + (side == "a"), nb + (side == "b")
        if total not in looks:
            continue
        look += 1
        if min(na, nb) < MIN_SIDE:
            continue
        r, lo, hi = interval(a.logs[:na], b.logs[:nb], scale, conf, trim)
        last = Decision(outcome(lo, hi, precision), r, lo, hi, look, total, conf)
        if last.outcome != UNDECIDED:
            return last
    if last is not None:
        return dataclasses.replace(last, look=look, launches=a.n + b.n)
    ratio = math.exp(trimmed_mean(a.logs, trim) - trimmed_mean(b.logs, trim) - math.log(scale))
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
    a: Side,
    b: Side,
    precision: float,
    scale: float = 1.0,
    alpha: float = ALPHA,
    looks: Sequence[int] = LOOKS,
    trim: float = TRIM,
    optimism: float = 0.0,
) -> tuple[int, int] | None:
    """Launches to add to (a, b) for the pair to be decided at a later look, were the
    measured spreads and ratio the true ones: the first look after the current
    launches whose projected interval is narrow enough, with the launches allocated as
    `next_side` does. None when not even the last look would do (no allocation could).

    `optimism` z > 0 projects instead at the most favourable ratio within z standard
    errors of the measured one and at each side's spread at the low end of its own
    one-sided interval z normal deviates out (`favourable`): the give-up rule of the
    loop (`GIVE_UP_Z`), where the measured values of a few launches are no truth.

    A side's spread is n x its trimmed mean's squared standard error (its variance where
    nothing is trimmed yet). Until both sides have enough launches to cut one from each
    end, a single slow launch carries its full weight in that spread; rather than give
    the pair up on it, the answer is then the launches that bring both sides there."""
    if min(a.n, b.n) < 2:
        return None
    (ma, sa, ha), (mb, sb, hb) = trimmed(a.logs, trim), trimmed(b.logs, trim)
    d = ma - mb - math.log(scale)
    target, sa, sb = (float(x) for x in favourable(d, sa, sb, ha, hb, precision, optimism))
    conf = confidence(alpha, looks)
    va, vb, na, nb = a.n * sa, b.n * sb, a.n, b.n
    for look in (n for n in looks if n > a.n + b.n):
        while na + nb < look:
            ahead = na * math.sqrt(a.launch_s) > nb * math.sqrt(b.launch_s)
            na, nb = (na, nb + 1) if ahead else (na + 1, nb)
        sa, sb = va / na, vb / nb
        ha, hb = kept(na, trim), kept(nb, trim)
        df = (sa + sb) ** 2 / (sa**2 / (ha - 1) + sb**2 / (hb - 1)) if sa + sb > 0 else 1.0
        if stats.t_quantile(0.5 + conf / 2, max(df, 1.0)) * math.sqrt(sa + sb) <= target:
            return na - a.n, nb - b.n
    first_cut = math.ceil(1 / trim) if trim > 0 else 0
    if min(a.n, b.n) < first_cut:
        return max(0, first_cut - a.n), max(0, first_cut - b.n)
    return None


def favourable(
    d: Num, sa: Num, sb: Num, ha: int, hb: int, precision: float, z: float
) -> tuple[Num, Num, Num]:
    """(half-width needed, sa, sb) for the projection of a pair whose log ratio reads d,
    with squared standard errors sa and sb from ha and hb kept launches a side, taken z
    standard errors towards what decides soonest (z = 0: the measured values). Scalars
    or one row per pair.

    The ratio: the one within d +- z sqrt(sa + sb) that needs the widest interval to be
    decided (`needed_half_width` is largest either at an end or, where the range holds
    it, at `widest_inside`: the larger of |d|, convex, and the room inside the
    precision, a tent peaking there).
    Each spread: its variance times k / (chi-square's upper z quantile at k = h - 1
    degrees of freedom), the low end of its one-sided interval (Wilson and Hilferty's
    approximation: within 1% of the exact quantile from k = 2 at z = 1)."""
    if z <= 0:
        return needed_half_width(d, precision), sa, sb
    se = np.sqrt(sa + sb)
    lo, hi = d - z * se, d + z * se
    ends = np.maximum(needed_half_width(lo, precision), needed_half_width(hi, precision))
    inside = np.clip(widest_inside(precision), lo, hi)
    target = np.maximum(ends, needed_half_width(inside, precision))
    return target, sa * _low_variance(ha - 1, z), sb * _low_variance(hb - 1, z)


def _low_variance(k: int, z: float) -> float:
    """k / chi-square's upper quantile z normal deviates out, at k degrees of freedom."""
    c = 2 / (9 * k)
    return (1 - c + z * math.sqrt(c)) ** -3.0


def outcomes(
    a: np.ndarray,
    b: np.ndarray,
    precision: float,
    conf: float,
    looks: Sequence[int] = LOOKS,
    trim: float = TRIM,
) -> np.ndarray:
    """The sequential outcome of many pairs at once (`sequences`, never given up)."""
    return sequences(a, b, precision, conf, looks, trim)[0]


def sequences(
    a: np.ndarray,
    b: np.ndarray,
    precision: float,
    conf: float,
    looks: Sequence[int] = LOOKS,
    trim: float = TRIM,
    give_up: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The sequential outcome of many pairs at once, and the launches each took: row i of
    `a` and `b` are the launches of pair i in the order they come. With equal launch
    costs `next_side` alternates from three a side, so at N launches side a has
    ceil(N/2) and b floor(N/2); each pair is settled at its first deciding look, as
    `decide` settles it.

    `give_up` (an optimism z, or None: never) stops a pair after any launch from the
    first look on where `more_launches` at that z finds no look within reach, as the
    loop does (`until_decided.choose`). A pair neither decided nor given up took the
    last look's launches."""
    result = np.full(a.shape[0], UNDECIDED, dtype=object)
    launches = np.full(a.shape[0], min(looks[-1], a.shape[1] + b.shape[1]))
    open_ = np.ones(a.shape[0], dtype=bool)
    for total in range(looks[0], looks[-1] + 1) if give_up is not None else looks:
        na, nb = (total + 1) // 2, total // 2
        if na > a.shape[1] or nb > b.shape[1]:
            break
        if min(na, nb) < MIN_SIDE:
            continue
        ma, va, ha = _trimmed_rows(a[:, :na], trim)
        mb, vb, hb = _trimmed_rows(b[:, :nb], trim)
        if total in looks:
            different, equivalent = _settled(ma - mb, va, vb, ha, hb, precision, conf)
            result[open_ & different] = DIFFERENT
            result[open_ & equivalent] = EQUIVALENT
            launches[open_ & (different | equivalent)] = total
            open_ &= ~(different | equivalent)
        if give_up is not None and total < looks[-1]:
            beyond = _beyond_reach(ma - mb, va, vb, (na, nb), precision, conf, looks, trim, give_up)
            if trim > 0 and min(na, nb) < math.ceil(1 / trim):
                beyond[:] = False  # as `more_launches`: launches up to the first cut
            launches[open_ & beyond] = total
            open_ &= ~beyond
    return result, launches


def _settled(
    diff: np.ndarray,
    va: np.ndarray,
    vb: np.ndarray,
    ha: int,
    hb: int,
    precision: float,
    conf: float,
) -> tuple[np.ndarray, np.ndarray]:
    """(different, equivalent) per row at a look, as `interval` and `outcome` read it."""

    def different(half: np.ndarray) -> np.ndarray:
        return (np.exp(diff + half) < 1) | (np.exp(diff - half) > 1)

    def equivalent(half: np.ndarray) -> np.ndarray:
        low, high = np.exp(diff - half), np.exp(diff + half)
        return (low >= 1 - precision) & (high <= 1 + precision)

    half = _half_widths(va, vb, ha, hb, conf, (different, equivalent))
    is_different = different(half)
    return is_different, ~is_different & equivalent(half)


def _beyond_reach(
    diff: np.ndarray,
    va: np.ndarray,
    vb: np.ndarray,
    sides: tuple[int, int],
    precision: float,
    conf: float,
    looks: Sequence[int],
    trim: float,
    z: float,
) -> np.ndarray:
    """Per row, whether `more_launches` at optimism z finds no look within reach, with
    equal launch costs: squared standard errors va and vb of the sides' launches
    (`sides`) projected to the last look, whose interval is the narrowest."""
    (na, nb), (la, lb) = sides, ((looks[-1] + 1) // 2, looks[-1] // 2)
    target, sa, sb = favourable(diff, va, vb, kept(na, trim), kept(nb, trim), precision, z)

    def within_reach(half: np.ndarray) -> np.ndarray:
        return half <= target

    last = (sa * na / la, sb * nb / lb, kept(la, trim), kept(lb, trim))
    return ~within_reach(_half_widths(*last, conf, (within_reach,)))


def _half_widths(
    va: np.ndarray,
    vb: np.ndarray,
    ha: int,
    hb: int,
    conf: float,
    tests: Sequence[Callable[[np.ndarray], np.ndarray]],
) -> np.ndarray:
    """Welch's (or Yuen's) half-width in log ratio per row, from squared standard errors
    va and vb of ha and hb kept launches, exact wherever it matters to `tests` (each true
    for a half-width and every narrower one). Quantiles at the degrees of freedom rounded
    down and up to a tenth bound the exact one; a row whose tests read the same at both
    keeps the wider, and only the others cost an exact quantile, so thousands of rows
    are decided as `interval` decides each."""
    df = (va + vb) ** 2 / np.maximum(va**2 / (ha - 1) + vb**2 / (hb - 1), 1e-300)
    df = np.maximum(df, 1.0)
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


@dataclasses.dataclass(frozen=True)
class ErrorRates:
    sequences: int
    false_different: float  # an A/A pair called different
    false_equivalent: float  # a pair whose true ratio is 1 + P called equivalent
    aa_decided: float  # share of A/A pairs decided at all (as equivalent, rightly)


def simulate(
    logs: Sequence[float] | np.ndarray,
    precision: float,
    sequences: int = 10_000,
    alpha: float = ALPHA,
    looks: Sequence[int] = LOOKS,
    seed: int = 0,
    trim: float = TRIM,
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
    side = (looks[-1] + 1) // 2

    def draws(shift: float) -> np.ndarray:
        return rng.choice(pool, (sequences, side)) + rng.normal(0.0, h, (sequences, side)) + shift

    conf = confidence(alpha, looks)
    aa = outcomes(draws(0.0), draws(0.0), precision, conf, looks, trim)
    edge = outcomes(draws(math.log(1 + precision)), draws(0.0), precision, conf, looks, trim)
    return ErrorRates(
        sequences,
        float(np.mean(aa == DIFFERENT)),
        float(np.mean(edge == EQUIVALENT)),
        float(np.mean(aa != UNDECIDED)),
    )
