"""What it would take to settle the undecided pairs: a lower bound on more launches.

`sequential.more_launches` answers for one pair alone. Pairs share cells (ddp / horovod
and ddp / paddle both use the ddp cell), so the minutes to settle several pairs are not
the sum of their minutes alone: a launch of the shared cell narrows both. The question
a user asks at the end of `bench run --decide-at` is "could any allocation have settled
k of these pairs in the time I gave it?", and this module bounds the answer from below,
at the measured ratios and spreads taken as true.

A pair of cells a and b is decided at a look, at L launches of the pair, when its
interval's half-width t sqrt(v_a / N_a + v_b / N_b) fits within what its ratio needs
(`sequential.needed_half_width`), with N the launches of a cell at that look, v the
variance of its log throughput and t Student's quantile at Welch's degrees of freedom,
which are at most L - 2. Two consequences hold for any allocation:
- the deciding look is no earlier than the pair's **first possible look**: the first
  look still to come at which even the best split of its L launches (n_a / n_b =
  sd_a / sd_b, half-width t(L - 2) (sd_a + sd_b) / sqrt(L)) would fit;
- at the deciding look t is at least `ZT`, the quantile at the last look's degrees of
  freedom, so z = ZT in the spread constraint below can only understate the launches.
The least seconds that settle a set of pairs are then at least the value of

    minimise  sum_i c_i (N_i - n_i)
    subject to  v_a / N_a + v_b / N_b <= (target_ab / ZT)^2,
                N_a + N_b >= the pair's first possible look        (each pair),
                N_i >= max(n_i, MIN_SIDE),

a convex problem (linear cost and look constraints, convex spread constraints), with
c_i a cell's seconds a launch. It models the loop as it runs: Welch's interval
(`sequential.TRIM` 0), `LOOKS` and `ALPHA` as they are. Whole launches, a look only at
its exact count, and a t wider than ZT at most looks all add to what an allocation
really needs: the bound is
never a plan, and it shows a count out of reach (more than a budget had left) only at
the measured values, which a few launches measure loosely.

It is solved by a barrier method on the primal (Newton steps; Boyd and Vandenberghe,
Convex Optimization, 11.3), whose central points give multipliers for the spread and
look constraints; the dual function at any nonnegative multipliers is a lower bound
(weak duality), and that, evaluated in closed form, is what is returned. At the end
the gap to the feasible primal point is at most `GAP` of its cost.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence

import numpy as np

from bench.measure import sequential, stats
from bench.measure.sequential import Side

# Welch's degrees of freedom at a look of L launches are at most L - 2, and the t
# quantile falls with them: no look's quantile is below this one
_T_AT = {
    look: stats.t_quantile(0.5 + sequential.confidence() / 2, look - 2) for look in sequential.LOOKS
}
ZT = _T_AT[sequential.LOOKS[-1]]
GAP = 1e-4  # the barrier method stops within this share of the cost
# a connected group of undecided pairs is tried subset by subset (2^pairs problems);
# past this many pairs in one group (a fourth engine at one worker count), it is not
MAX_GROUP_PAIRS = 6


@dataclasses.dataclass(frozen=True)
class Open:
    """An undecided pair between cells a and b (indices into the cells), with the
    half-width of log ratio that would decide it at its measured ratio."""

    a: int
    b: int
    target: float


def open_pair(cells: Sequence[Side], a: int, b: int, precision: float, scale: float = 1.0) -> Open:
    d = float(np.mean(cells[a].logs) - np.mean(cells[b].logs) - math.log(scale))
    return Open(a, b, float(sequential.needed_half_width(d, precision)))


def spread(side: Side) -> float:
    """The variance of a cell's log throughputs; 0 for fewer than two launches, which
    can only lower the bound."""
    return float(np.var(side.logs, ddof=1)) if side.n >= 2 else 0.0


def first_look(sd_sum: float, target: float, after: int) -> int | None:
    """The first look past `after` launches of the pair at which it could be decided:
    its launches split at best (half-width t(L - 2) sd_sum / sqrt(L) at L launches).
    None: at no look, not even the last."""
    for look in sequential.LOOKS:
        if look > after and _T_AT[look] * sd_sum / math.sqrt(look) <= target:
            return look
    return None


def least_seconds(
    cells: Sequence[Side], pairs: Sequence[Open], have: Sequence[int] | None = None
) -> float:
    """A lower bound on the seconds of launches, beyond those a cell has, after which
    every pair in `pairs` would be decided, were the cells' measured spreads and the
    pairs' ratios true. inf: a pair could be decided at no look.

    Without `have` a cell has all its launches, and a pair's looks so far did not decide
    it; with `have` a cell has that many (from the first launches, as if the others had
    not been made), and no look has been taken yet."""
    if not pairs:
        return 0.0
    used = sorted({i for p in pairs for i in (p.a, p.b)})
    at = {cell: k for k, cell in enumerate(used)}
    n = [float(cells[i].n if have is None else have[i]) for i in used]
    v = [spread(cells[i]) for i in used]
    ends = [(at[p.a], at[p.b]) for p in pairs]
    looks = []
    for p, (a, b) in zip(pairs, ends, strict=True):
        after = int(n[a] + n[b]) if have is None else 2 * sequential.MIN_SIDE - 1
        look = first_look(math.sqrt(v[a]) + math.sqrt(v[b]), p.target, after)
        if look is None:
            return math.inf
        looks.append(float(look))
    problem = Problem(
        c=np.array([cells[i].launch_s for i in used]),
        n=np.array(n),
        floor=np.maximum(np.array(n), float(sequential.MIN_SIDE)),
        v=np.array(v),
        ends=ends,
        h=np.array([(p.target / ZT) ** 2 for p in pairs]),
        looks=np.array(looks),
    )
    floors = float(problem.c @ (problem.floor - problem.n))  # the dual at zero multipliers
    if problem.holds_at(problem.floor):  # the floors decide every pair: nothing to solve
        return floors
    bound = problem.bound(*problem.multipliers())
    # a failed solve must not read as out of reach: the floors are always a bound
    return max(bound, floors) if math.isfinite(bound) else floors


@dataclasses.dataclass
class Problem:
    """The convex problem of the module's docstring for one set of pairs: cells' costs
    c, launches made n and floors, variances v; each pair's ends, spread limit h and
    first possible look."""

    c: np.ndarray
    n: np.ndarray
    floor: np.ndarray
    v: np.ndarray
    ends: list[tuple[int, int]]
    h: np.ndarray
    looks: np.ndarray

    def __post_init__(self) -> None:
        # which two cells each pair joins, a row per pair
        self._joins = np.zeros((len(self.ends), len(self.c)))
        for row, (a, b) in enumerate(self.ends):
            self._joins[row, [a, b]] = 1.0
        # the look and floor constraints are linear: their gradients never change
        self._linear = -np.vstack([self._joins, np.eye(len(self.c))])

    def bound(self, lam: np.ndarray, mu: np.ndarray) -> float:
        """The dual function at multipliers lam (spread) and mu (look) >= 0: the
        Lagrangian's minimum over N >= floor, cell by cell (c_i - M_i) N_i + W_i / N_i,
        M_i the sum of its pairs' mu and W_i its variance times the sum of their lam.
        A valid lower bound for any such multipliers; -inf where some M_i > c_i."""
        w = self.v * (lam @ self._joins)
        e = self.c - mu @ self._joins
        if np.any(e < 0):
            return -math.inf
        with np.errstate(divide="ignore", invalid="ignore"):
            best = np.where(e > 0, np.sqrt(w / np.where(e > 0, e, 1.0)), np.inf)
        launches = np.maximum(self.floor, best)
        # where e = 0 the infimum of W / N is 0 (N unbounded): the e N term is 0 too
        inner = np.where(np.isinf(launches), 0.0, e * launches + w / launches)
        return float(inner.sum() - self.c @ self.n - lam @ self.h + mu @ self.looks)

    def holds_at(self, x: np.ndarray) -> bool:
        """Whether launches x meet every pair's spread and look constraint."""
        return bool(np.all(self._values(x)[: 2 * len(self.ends)] <= 0))

    def _values(self, x: np.ndarray) -> np.ndarray:
        """Each constraint's value f at x (feasible: f < 0): the pairs' spread
        constraints, then their look constraints, then the floors."""
        share = self.v / x  # a cell's term v_i / N_i in its pairs' variance
        return np.concatenate(
            [self._joins @ share - self.h, self.looks - self._joins @ x, self.floor - x]
        )

    def _constraints(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each constraint's value (`_values`) and gradient at x. Only the spread
        constraints curve, and only along their own two cells: the third value is each
        one's Hessian diagonal, a row per pair."""
        vals, share = self._values(x), self.v / x
        spread = self._joins * (-share / x)
        return vals, np.vstack([spread, self._linear]), self._joins * (2 * share / x**2)

    def start(self) -> np.ndarray:
        """A strictly feasible point: each cell past its floor and its pairs' looks, and
        its share of every spread limit under a third of it."""
        x = self.floor + 1.0
        for (a, b), h, look in zip(self.ends, self.h, self.looks, strict=True):
            for i in (a, b):
                x[i] = max(x[i], look + 1.0, 3.0 * self.v[i] / h + 1.0)
        return x

    def multipliers(self) -> tuple[np.ndarray, np.ndarray]:
        """(lam, mu) from the barrier method's last central point: 1 / (t (-f)) for each
        pair's spread and look constraint (the floors are kept in the dual's minimum)."""
        x = self.start()
        count = 2 * len(self.ends) + len(self.c)
        t = count / max(float(self.c @ x), 1e-9)
        while True:
            x = self._centre(x, t)
            vals = self._values(x)
            # the duality gap at a central point is count / t: within GAP of the cost,
            # or a millisecond where the cost is near 0
            if count / t <= max(GAP * float(self.c @ (x - self.n)), 1e-3) or t > 1e15:
                break
            t *= 20.0
        pairs = len(self.ends)
        lam = 1.0 / (t * -vals[:pairs])
        mu = 1.0 / (t * -vals[pairs : 2 * pairs])
        # an inexact centre can leave a cell's mu a hair above its cost: scale them in
        m = mu @ self._joins
        over = np.max(np.where(self.c > 0, m / self.c, 0.0), initial=0.0)
        return lam, mu / max(1.0, over * (1 + 1e-12))

    def barrier(self, x: np.ndarray, t: float) -> float:
        """The centring objective t c.x - sum log(-f(x)); inf outside the feasible set."""
        vals = self._values(x)  # the line search's hot path: no gradients
        return math.inf if np.any(vals >= 0) else float(t * self.c @ x - np.log(-vals).sum())

    def newton_terms(self, x: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray]:
        """The barrier's gradient and Hessian at a strictly feasible x: each constraint
        adds g g' / f^2 and, for the spread constraints, its curvature over -f."""
        vals, grads, curve = self._constraints(x)
        grad = t * self.c + (grads / -vals[:, None]).sum(axis=0)
        spread = vals[: len(self.ends)]
        hess = grads.T @ (grads / vals[:, None] ** 2) + np.diag(
            (curve / -spread[:, None]).sum(axis=0)
        )
        return grad, hess

    def _centre(self, x: np.ndarray, t: float) -> np.ndarray:
        """Newton's method on the barrier, from a strictly feasible x."""
        for _ in range(100):
            grad, hess = self.newton_terms(x, t)
            step = -np.linalg.solve(hess, grad)
            decrement = float(-grad @ step)
            if decrement / 2 <= 1e-12:
                break
            size, now = 1.0, self.barrier(x, t)
            while self.barrier(x + size * step, t) > now - 0.25 * size * decrement:
                size /= 2
                if size < 1e-12:
                    return x
            x = x + size * step
        return x


def least_more(
    cells: Sequence[Side], pairs: Sequence[Open], have: Sequence[int] | None = None
) -> list[float] | None:
    """For k = 0 .. len(pairs): a lower bound on the seconds of launches after which k of
    the undecided `pairs` would be decided (inf: not within the looks). None where a
    group of pairs sharing cells is too large to try its subsets. `have`: as for
    `least_seconds`.

    A pair that alone could be decided at no look is left out. The others fall into
    groups that share no cell, directly or through other pairs: each group's best subset
    of every size is found by trying its subsets, and the groups are combined by the
    cheapest split of k among them."""
    best = [0.0] + [math.inf] * len(pairs)
    alone = {p: least_seconds(cells, [p], have) for p in pairs}
    hopeful = [p for p in pairs if alone[p] < math.inf]
    for group in _groups(hopeful):
        if len(group) > MAX_GROUP_PAIRS:
            return None
        mine = [hopeful[k] for k in group]
        costs = [0.0, min(alone[p] for p in mine)] + [math.inf] * (len(mine) - 1)
        for size in range(2, len(mine) + 1):
            for subset in itertools.combinations(mine, size):
                costs[size] = min(costs[size], least_seconds(cells, subset, have))
        best = _combine(best, costs)
    # deciding k pairs decides k - 1 of them, so the bound for k - 1 holds for k too
    # (it smooths the barrier's tolerance out of the counts)
    return list(itertools.accumulate(best, max))


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
