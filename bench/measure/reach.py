"""What it would take to settle the undecided pairs: a lower bound on more launches.

`sequential.more_launches` answers for one pair alone. Pairs share cells (ddp / horovod
and ddp / paddle both use the ddp cell), so the minutes to settle several pairs are not
the sum of their minutes alone: a launch of the shared cell narrows both. The question
a user asks at the end of `bench run --decide-at` is "could any allocation have settled
k of these pairs in the time I gave it?", and this module answers it with a bound that
holds for every allocation.

Were the measured spreads and ratios true, a pair of cells a and b is decided once its
interval's half-width z sqrt(v_a / N_a + v_b / N_b) fits within the half-width its
ratio needs (`sequential.needed_half_width`), with N the launches of a cell and v the
variance of its log throughput, at a look still to come. Adding launches costs each
cell's seconds a launch. The least seconds that settle a set of pairs solve

    minimise  sum_i c_i (N_i - n_i)
    subject to  v_a / N_a + v_b / N_b <= h_ab  and  N_a + N_b >= the pair's next look,
                N_i >= max(n_i, MIN_SIDE),

a convex problem (linear cost and look constraints, convex spread constraints). Its
value is a lower bound on what any allocation, the loop's included, could achieve, and
more so: launches come in whole numbers, the look that decides a pair comes at exactly
its count (and later launches do not count for it), the t quantile at a look's few
degrees of freedom is wider than the normal z used here, and a pair beyond the last
look alone counts as out of reach. So when the bound for k pairs exceeds the minutes a
budget had left, no allocation within the budget could have settled k, at the measured
values.

It is solved through its dual: for multipliers >= 0 the Lagrangian's minimum has a
closed form, and any multipliers give a lower bound (weak duality). Coordinate ascent
converges to the optimum (the problem is strictly convex in the launches that carry a
spread, and strictly feasible); it stops when a feasible allocation built from the same
multipliers costs within 0.1% of the bound, and the bound, never the allocation, is
what is returned.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

from bench.measure import sequential
from bench.measure.sequential import Side

# the normal quantile of a look's confidence: narrower than any look's t interval
Z = NormalDist().inv_cdf(0.5 + sequential.confidence() / 2)
MAX_SWEEPS = 500
TOLERANCE = 1e-3  # relative gap between the bound and a feasible allocation's cost
# a connected group of undecided pairs is settled subset by subset (2^pairs problems);
# past this many pairs in one group, the bound is not computed
MAX_GROUP_PAIRS = 10


@dataclasses.dataclass(frozen=True)
class Open:
    """An undecided pair between cells a and b (indices into the cells), with the
    half-width of log ratio that would decide it at its measured ratio, and whether it
    is beyond the last look: even its launches split at best between the sides, as
    many as the last look counts, would not narrow it that far."""

    a: int
    b: int
    target: float
    beyond: bool


def open_pair(
    cells: Sequence[Side], a: int, b: int, precision: float, scale: float = 1.0, z: float = Z
) -> Open:
    """The pair of cells a and b at its measured ratio and spreads. Beyond the last look:
    the split n_a / n_b = sd_a / sd_b gives the narrowest interval for a total of launches,
    (sd_a + sd_b) / sqrt(total) in standard error, and no look comes after the last."""
    side_a, side_b = cells[a], cells[b]
    d = float(np.mean(side_a.logs) - np.mean(side_b.logs) - math.log(scale))
    target = float(sequential.needed_half_width(d, precision))
    if min(side_a.n, side_b.n) < 2:
        return Open(a, b, target, beyond=False)
    sd = float(np.std(side_a.logs, ddof=1) + np.std(side_b.logs, ddof=1))
    return Open(a, b, target, beyond=z * sd / math.sqrt(sequential.LOOKS[-1]) > target)


def least_seconds(
    cells: Sequence[Side],
    pairs: Sequence[Open],
    have: Sequence[int] | None = None,
    z: float = Z,
) -> float:
    """A lower bound on the seconds of launches, beyond the `have` a cell already has,
    that would settle every pair in `pairs` at once, were each cell's spread the one
    measured over all its launches: any allocation that settles them all costs at least
    this much. inf where a cell has too few launches to measure its spread (fewer than
    two), or a pair has had its last look.

    Without `have` (from the launches made), a pair is decided only at a look still to
    come, so its launches must reach its next look: the looks it has had did not decide
    it. With `have` (as if only those launches were made), no look has been taken."""
    if not pairs:
        return 0.0
    used = sorted({i for p in pairs for i in (p.a, p.b)})
    if any(cells[i].n < 2 for i in used):
        return math.inf
    at = {cell: k for k, cell in enumerate(used)}
    n = [float(cells[i].n if have is None else have[i]) for i in used]
    ends = [(at[p.a], at[p.b]) for p in pairs]
    looks = [0.0] * len(pairs)
    if have is None:
        for k, (a, b) in enumerate(ends):
            later = [x for x in sequential.LOOKS if x > n[a] + n[b]]
            if not later:
                return math.inf
            looks[k] = float(later[0])
    return _Dual(
        c=[cells[i].launch_s for i in used],
        n=n,
        floor_n=[max(x, float(sequential.MIN_SIDE)) for x in n],
        v=[float(np.var(cells[i].logs, ddof=1)) for i in used],
        ends=ends,
        h=[(p.target / z) ** 2 for p in pairs],
        looks=looks,
    ).solve()


@dataclasses.dataclass
class _Dual:
    """The dual of the problem in the module's docstring, for one set of pairs, in
    launches N (where the constraints are convex and the look's is linear):

        minimise  sum_i c_i (N_i - n_i)
        subject to  v_a / N_a + v_b / N_b <= h_p  and  N_a + N_b >= look_p  (each pair p),
                    N_i >= floor_n_i.

    With multipliers lam_p (spread) and mu_p (look), the Lagrangian splits by cell into
    (c_i - M_i) N_i + W_i / N_i, M_i the sum of its pairs' mu, W_i = v_i times the sum
    of their lam; its minimum over N_i is at sqrt(W_i / (c_i - M_i)), clipped below at
    floor_n_i, and is minus infinity once M_i > c_i, which the ascent never allows. Any
    multipliers give a lower bound (weak duality)."""

    c: list[float]
    n: list[float]
    floor_n: list[float]
    v: list[float]
    ends: list[tuple[int, int]]
    h: list[float]
    looks: list[float]

    def __post_init__(self) -> None:
        self.lam = [0.0] * len(self.ends)
        self.mu = [0.0] * len(self.ends)

    def _sums(self) -> tuple[list[float], list[float]]:
        """(M_i, lam summed) of each cell."""
        m, lam = [0.0] * len(self.c), [0.0] * len(self.c)
        for (a, b), x, y in zip(self.ends, self.mu, self.lam, strict=True):
            m[a] += x
            m[b] += x
            lam[a] += y
            lam[b] += y
        return m, lam

    def _launches(self, i: int, m: float, lam: float) -> float:
        """N_i minimising (c_i - m) N + v_i lam / N over N >= floor_n_i."""
        w, e = self.v[i] * lam, self.c[i] - m
        if w <= 0:
            return self.floor_n[i]
        return max(self.floor_n[i], math.sqrt(w / e)) if e > 0 else math.inf

    def launches(self) -> list[float]:
        m, lam = self._sums()
        return [self._launches(i, m[i], lam[i]) for i in range(len(self.c))]

    def bound(self) -> float:
        m, lam = self._sums()
        total = sum(y * h for y, h in zip(self.mu, self.looks, strict=True))
        total -= sum(x * h for x, h in zip(self.lam, self.h, strict=True))
        for i in range(len(self.c)):
            n = self._launches(i, m[i], lam[i])
            e = self.c[i] - m[i]
            # at e = 0 with no spread weight the minimum is e N = 0, whatever N
            total += (e * n if e > 0 else 0.0) + (self.v[i] * lam[i] / n) - self.c[i] * self.n[i]
        return total

    def feasible_cost(self) -> float:
        """The cost of N(lam, mu) scaled up until every pair's constraints hold."""
        ns = self.launches()
        if any(math.isinf(x) for x in ns):
            return math.inf
        grow = 1.0
        for (a, b), h, look in zip(self.ends, self.h, self.looks, strict=True):
            grow = max(grow, (self.v[a] / ns[a] + self.v[b] / ns[b]) / h, look / (ns[a] + ns[b]))
        return sum(c * (grow * x - n) for c, x, n in zip(self.c, ns, self.n, strict=True))

    def _slope(self, p: int, which: str, value: float) -> float:
        """The dual's derivative along lam_p or mu_p at this value (the others held):
        nonincreasing in it."""
        old = getattr(self, which)[p]
        getattr(self, which)[p] = value
        a, b = self.ends[p]
        ns = self.launches()
        getattr(self, which)[p] = old
        if which == "lam":
            return self.v[a] / ns[a] + self.v[b] / ns[b] - self.h[p]
        return self.looks[p] - ns[a] - ns[b]

    def _ascend(self, p: int, which: str) -> None:
        """Set lam_p or mu_p to where the dual's derivative along it crosses zero."""
        getattr(self, which)[p] = 0.0
        if self._slope(p, which, 0.0) <= 0:
            return
        if which == "mu":  # keep every cell's M below its cost
            m, _ = self._sums()
            a, b = self.ends[p]
            high = min(self.c[a] - m[a], self.c[b] - m[b])
        else:
            high = 1.0
            while self._slope(p, which, high) > 0:
                high *= 4
        low = 0.0
        for _ in range(100):
            mid = (low + high) / 2
            low, high = (mid, high) if self._slope(p, which, mid) > 0 else (low, mid)
            if high - low <= 1e-12 * high:
                break
        getattr(self, which)[p] = low if which == "mu" else high

    def solve(self) -> float:
        best = self.bound()
        for _ in range(MAX_SWEEPS):
            for p in range(len(self.ends)):
                self._ascend(p, "lam")
                self._ascend(p, "mu")
            best = max(best, self.bound())
            if self.feasible_cost() - best <= TOLERANCE * max(best, 1.0):
                break
        return best


def least_more(
    cells: Sequence[Side], pairs: Sequence[Open], have: Sequence[int] | None = None
) -> list[float] | None:
    """For k = 0 .. len(pairs): a lower bound on the seconds of launches after which k of
    the undecided `pairs` would be decided (inf: not within the looks). None where a
    group of pairs sharing cells is too large to try its subsets. A pair beyond the last
    look counts as never decided.

    Pairs that share no cell, directly or through other pairs, are independent groups:
    each group's best subset of every size is found by trying its subsets, and the
    groups are combined by the cheapest split of k among them. `have`: as for
    `least_seconds`."""
    best = [0.0] + [math.inf] * len(pairs)
    for group in _groups(pairs):
        mine = [p for p in group if not pairs[p].beyond]
        if len(mine) > MAX_GROUP_PAIRS:
            return None
        costs = [0.0] + [math.inf] * len(mine)
        for size in range(1, len(mine) + 1):
            for subset in itertools.combinations(mine, size):
                costs[size] = min(
                    costs[size], least_seconds(cells, [pairs[p] for p in subset], have)
                )
        best = _combine(best, costs)
    return best


def _groups(pairs: Sequence[Open]) -> list[list[int]]:
    """Indices of pairs, grouped by the cells they share (connected components)."""
    root: dict[int, int] = {}

    def find(x: int) -> int:
        while root.setdefault(x, x) != x:
            x = root[x]
        return x

    for p in pairs:
        root[find(p.a)] = find(p.b)
    out: dict[int, list[int]] = {}
    for k, p in enumerate(pairs):
        out.setdefault(find(p.a), []).append(k)
    return list(out.values())


def _combine(left: list[float], right: list[float]) -> list[float]:
    """Min-plus convolution: the cheapest k over two independent groups, padded to the
    length of `left`."""
    out = [math.inf] * len(left)
    for i, x in enumerate(left):
        for j, y in enumerate(right):
            if i + j < len(out):
                out[i + j] = min(out[i + j], x + y)
    return out
