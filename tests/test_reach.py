"""What would settle the rest: the lower bound on launches that decide more pairs.

The bound (bench/measure/reach.py) is checked against brute force over allocations of
the same continuous problem, against the loop's own projection for one pair, and where
pairs share a cell; the tables and the line that report it on constructed launches and
on a committed sweep."""

from __future__ import annotations

import heapq
import math
from pathlib import Path

import numpy as np
import pytest

from bench.analysis import decisions, textfit
from bench.analysis.frame import synced_launches
from bench.measure import reach, stats
from bench.measure import sequential as sq

from .test_sequential import _engines_launches

ROOT = Path(__file__).resolve().parent.parent


def _cell(sd: float, n: int, launch_s: float, centre: float = 0.0) -> sq.Side:
    """n launches whose log throughputs have exactly this mean and sample sd."""
    z = np.random.default_rng(n).standard_normal(n)
    z = (z - z.mean()) / z.std(ddof=1)
    return sq.Side(tuple(centre + sd * z), launch_s)


def _brute(
    cells: list[sq.Side], pairs: list[reach.Open], free: list[int], have: list[int] | None = None
) -> float:
    """The problem's minimum by a fine grid over the launches of the cells in `free`, the
    remaining cell (at most one) set to the least its pairs allow; continuous launches.
    Each pair's launches reach its first possible look (after its launches so far, or
    from the first look with `have`)."""
    used = sorted({i for p in pairs for i in (p.a, p.b)})
    rest = [i for i in used if i not in free]
    assert len(rest) <= 1
    made = {i: cells[i].n if have is None else have[i] for i in used}
    var = {i: reach.spread(cells[i]) for i in used}
    low = {i: max(made[i], sq.MIN_SIDE) for i in used}
    grids = np.meshgrid(*[np.geomspace(low[i], 3000, 700) for i in free], indexing="ij")
    n = {i: g.ravel() for i, g in zip(free, grids, strict=True)}
    ok = np.ones(grids[0].size, dtype=bool)
    h = {p: (p.target / reach.ZT) ** 2 for p in pairs}
    look = {}
    for p in pairs:
        after = made[p.a] + made[p.b] if have is None else 2 * sq.MIN_SIDE - 1
        first = reach.first_look(math.sqrt(var[p.a]) + math.sqrt(var[p.b]), p.target, after)
        assert first is not None
        look[p] = first
    for p in pairs:
        if p.a in n and p.b in n:
            ok &= var[p.a] / n[p.a] + var[p.b] / n[p.b] <= h[p] * (1 + 1e-9)
            ok &= n[p.a] + n[p.b] >= look[p] * (1 - 1e-9)
    if rest:
        (r,) = rest
        need = np.full(ok.size, float(low[r]))
        for p in pairs:
            if r in (p.a, p.b):
                other = p.b if p.a == r else p.a
                room = h[p] - var[other] / n[other]
                ok &= room > 0
                need = np.maximum(need, var[r] / np.where(room > 0, room, 1.0))
                need = np.maximum(need, look[p] - n[other])
        n[r] = need
    cost = sum(cells[i].launch_s * (n[i] - made[i]) for i in used)
    return float(np.min(np.where(ok, cost, np.inf)))


def _exact(sd: float, n: int, centre: float) -> tuple[float, ...]:
    return _cell(sd, n, 1.0, centre).logs


def test_one_pair_the_bound_is_the_problems_minimum() -> None:
    cells = [_cell(0.03, 3, 6.0), _cell(0.05, 4, 9.0, centre=0.03)]
    pair = reach.open_pair(cells, 0, 1, 0.05)
    assert pair.target == pytest.approx(0.03)  # 0.970: excluding 1 is easier than 0.95
    got = reach.least_seconds(cells, [pair])
    brute = _brute(cells, [pair], free=[0])
    assert got == pytest.approx(brute, rel=0.01) and got <= brute * (1 + 1e-6)


def test_pairs_sharing_a_cell_cost_less_together_than_apart() -> None:
    """ddp / horovod and ddp / paddle both narrow with ddp's launches: together they need
    less than the sum of each alone, and the bound is the three-cell minimum."""
    cells = [_cell(0.04, 3, 5.0), _cell(0.10, 3, 6.0, 0.06), _cell(0.09, 3, 4.0, -0.07)]
    one, two = reach.open_pair(cells, 0, 1, 0.05), reach.open_pair(cells, 0, 2, 0.05)
    both = reach.least_seconds(cells, [one, two])
    apart = reach.least_seconds(cells, [one]) + reach.least_seconds(cells, [two])
    assert max(reach.least_seconds(cells, [p]) for p in (one, two)) <= both < apart * 0.95
    brute = _brute(cells, [one, two], free=[1, 2])
    assert both == pytest.approx(brute, rel=0.01) and both <= brute * (1 + 1e-6)
    third = reach.open_pair(cells, 1, 2, 0.05)
    all_three = reach.least_seconds(cells, [one, two, third])
    brute = _brute(cells, [one, two, third], free=[1, 2])
    assert all_three == pytest.approx(brute, rel=0.01) and all_three <= brute * (1 + 1e-6)


def test_the_bound_never_exceeds_what_the_loop_projects() -> None:
    """For one pair, the loop's projection (whole launches, at its looks, t quantiles)
    costs at least the bound: the bound is what no allocation can beat. Random pairs,
    of which the loop can project at least ten (the others are past its last look)."""
    projected = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        cells = [
            _cell(rng.uniform(0.01, 0.12), int(rng.integers(3, 12)), rng.uniform(3, 30), c)
            for c in (0.0, rng.uniform(-0.1, 0.1))
        ]
        need = sq.more_launches(cells[0], cells[1], 0.05)
        if need is None:
            continue
        projected += 1
        bound = reach.least_seconds(cells, [reach.open_pair(cells, 0, 1, 0.05)])
        cost = need[0] * cells[0].launch_s + need[1] * cells[1].launch_s
        assert bound <= cost + 1e-9, seed
    assert projected >= 10


def test_a_pair_too_noisy_for_the_last_look_is_out_of_reach() -> None:
    cells = [_cell(0.20, 5, 5.0), _cell(0.20, 5, 5.0, 0.01)]
    far = reach.open_pair(cells, 0, 1, 0.05)
    assert sq.more_launches(cells[0], cells[1], 0.05) is None
    assert reach.least_seconds(cells, [far]) == math.inf
    assert reach.least_more(cells, [far]) == [0.0, math.inf]
    # the edge: at 94 launches split as the sds, the half-width is t(92) (sd_a + sd_b) /
    # sqrt(94); the ratio 1.01 needs log 1.05 - 0.01, which an sd near 0.067 a side meets
    target = math.log(1.05) - 0.01
    edge = target * math.sqrt(sq.LOOKS[-1]) / reach.ZT / 2
    assert edge == pytest.approx(0.067, abs=1e-3)
    for sd, last in ((edge * 1.02, None), (edge * 0.98, sq.LOOKS[-1])):
        cells = [_cell(sd, 5, 5.0), _cell(sd, 5, 5.0, -0.01)]
        pair = reach.open_pair(cells, 0, 1, 0.05)
        assert pair.target == pytest.approx(target)
        assert reach.first_look(2 * sd, target, 10) == last
        assert (reach.least_seconds(cells, [pair]) == math.inf) == (last is None)


def test_the_first_possible_look_is_where_the_best_split_first_fits() -> None:
    """At each look the t quantile of its largest degrees of freedom (L - 2) times the
    best split's standard error; the first look past the launches made where it fits."""
    t = {L: stats.t_quantile(0.5 + sq.confidence() / 2, L - 2) for L in sq.LOOKS}
    for sd_sum, target in ((0.02, 0.03), (0.1, 0.03), (0.05, 0.045)):
        fits = [L for L in sq.LOOKS if t[L] * sd_sum / math.sqrt(L) <= target]
        assert reach.first_look(sd_sum, target, 5) == fits[0]
        later = [L for L in fits if L > 20]
        assert reach.first_look(sd_sum, target, 20) == (later[0] if later else None)
    assert t[6] > 1.8 * reach.ZT  # a look at 6 launches needs nearly twice the width


@pytest.mark.parametrize("d", [-0.024, 0.024, -0.045, 0.06])
def test_the_cheapest_allocation_the_loop_would_decide_costs_no_less_than_the_bound(
    d: float,
) -> None:
    """Launches with exactly the measured means and spreads (3% a side, 3 + 3 made, 5 s
    and 7 s a launch), at every look and every split of its launches: the cheapest one
    the loop's own interval decides costs at least the bound. Ratios below and above 1,
    where the room inside +-5% is to different edges."""
    cells = [_cell(0.03, 3, 5.0, d), _cell(0.03, 3, 7.0)]
    bound = reach.least_seconds(cells, [reach.open_pair(cells, 0, 1, 0.05)])
    cheapest = math.inf
    for look in (x for x in sq.LOOKS if x > 6):
        for na in range(3, look - 2):
            _, low, high = sq.interval(
                _exact(0.03, na, d), _exact(0.03, look - na, 0.0), conf=sq.confidence()
            )
            if sq.outcome(low, high, 0.05) != sq.UNDECIDED:
                cheapest = min(cheapest, (na - 3) * 5.0 + (look - na - 3) * 7.0)
    assert 0 < bound <= cheapest < math.inf
    assert bound >= 0.5 * cheapest  # and not far below it, where the looks are few


def test_independent_pairs_add_and_the_cheapest_goes_first() -> None:
    cells = [
        _cell(0.02, 3, 5.0),
        _cell(0.02, 3, 5.0, 0.02),
        _cell(0.04, 3, 5.0),
        _cell(0.04, 3, 5.0, 0.02),
    ]
    cheap, dear = reach.open_pair(cells, 0, 1, 0.05), reach.open_pair(cells, 2, 3, 0.05)
    alone = [reach.least_seconds(cells, [p]) for p in (cheap, dear)]
    assert alone[0] < alone[1]
    got = reach.least_more(cells, [dear, cheap])
    assert got is not None
    assert got[0] == 0 and got[1] == pytest.approx(alone[0])
    assert got[2] == pytest.approx(sum(alone))


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_looks_binding_on_a_shared_cell_give_the_minimum_in_any_order(
    order: tuple[int, int],
) -> None:
    """Narrow spreads, so only the looks bind: 8 + 8 and 8 + 6 launches, both pairs at
    their next looks (19 and 19), the shared cell 0 the costly one or not. The bound is
    the brute-force minimum whichever pair comes first."""
    cells = [
        _cell(0.001, 8, 4.2, 0.0),
        _cell(0.001, 8, 4.1, 0.2),
        _cell(0.001, 6, 10.0, -0.2),
    ]
    pairs = [reach.open_pair(cells, 0, 1, 0.05), reach.open_pair(cells, 0, 2, 0.05)]
    pairs = [pairs[k] for k in order]
    got = reach.least_seconds(cells, pairs)
    brute = _brute(cells, pairs, free=[0, 1])
    assert got == pytest.approx(brute, rel=0.01) and got <= brute * (1 + 1e-6)


def test_from_the_first_launches_the_bound_is_that_problems_minimum() -> None:
    """`have`: as if each cell had only its first three launches, with no look taken."""
    cells = [_cell(0.03, 9, 5.0), _cell(0.05, 11, 7.0, 0.04), _cell(0.04, 10, 6.0, -0.05)]
    pairs = [reach.open_pair(cells, 0, 1, 0.05), reach.open_pair(cells, 0, 2, 0.05)]
    have = [3, 3, 3]
    got = reach.least_seconds(cells, pairs, have)
    brute = _brute(cells, pairs, free=[1, 2], have=have)
    assert got == pytest.approx(brute, rel=0.01) and got <= brute * (1 + 1e-6)
    assert got > reach.least_seconds(cells, pairs)  # the launches made already count


def test_a_group_too_large_to_try_is_not_computed() -> None:
    cells = [_cell(0.02, 3, 5.0, 0.01 * k) for k in range(5)]  # 10 pairs, one group
    pairs = [reach.open_pair(cells, a, b, 0.05) for a in range(5) for b in range(a + 1, 5)]
    assert len(pairs) > reach.MAX_GROUP_PAIRS
    assert reach.least_more(cells, pairs) is None
    r = decisions.Reach(2, 10, None, None)
    assert "not computed: more than 6 open pairs" in decisions.reach_line(r)
    (row,) = decisions.reach_rows(r).to_dict("records")
    assert row["head-to-heads decided"] == "2 of 10"
    assert row["more minutes"].startswith("not computed")
    # in text the sentence becomes a note under the table, named by the row's count
    lines = textfit.table(decisions.reach_rows(r), 100)
    assert any(ln.strip().startswith("[1] 2 of 10, more minutes: not computed") for ln in lines)


def test_the_report_says_what_any_allocation_would_need() -> None:
    """Three engines at one worker count, three launches each: ddp and horovod 3% apart at
    a 2% spread, paddle far from both (decided at the first look). The table counts from the decided, the line names the least minutes,
    and both agree with the bound computed directly."""
    ok = _engines_launches(
        {
            "ddp": ([100, 102, 98], 5.0),
            "horovod": ([97, 99, 95], 6.0),
            "paddle": ([60, 61, 59], 4.0),
        }
    )
    r = decisions.reach([ok], 0.05)
    assert (r.decided, r.total) == (2, 3)
    sides = decisions.Sides(decisions.usable(ok))
    (pair,) = [p for p in decisions.pairs(ok) if p.name == "ddp / horovod x1"]
    cells = [sides(pair.a_rows), sides(pair.b_rows)]
    alone = reach.least_seconds(cells, [reach.open_pair(cells, 0, 1, 0.05)])
    assert r.more_s is not None and r.more_s[3] == pytest.approx(alone)
    assert r.all_s is not None and r.all_s[3] > r.more_s[3]
    (row,) = decisions.reach_rows(r).to_dict("records")
    assert row["head-to-heads decided"] == "3 of 3"
    assert row["more minutes"] == round(alone / 60, 1)
    line = decisions.reach_line(r)
    assert f"{alone / 60:.1f} more minutes to decide 3 of 3 head-to-heads" in line
    noisy = _engines_launches(
        {"ddp": ([100, 130, 80] * 4, 5.0), "paddle": ([95, 125, 85] * 4, 5.0)}
    )
    assert decisions.reach_line(decisions.reach([noisy], 0.05)).endswith(
        "no allocation decides another head-to-head within the looks"
    )
    done = _engines_launches({"ddp": ([100, 101, 99], 5.0), "paddle": ([50, 51, 49], 5.0)})
    assert decisions.reach_line(decisions.reach([done], 0.05)) == ""
    assert decisions.reach_rows(decisions.reach([done], 0.05)).empty


def test_a_committed_sweep_shows_what_would_settle_its_open_pairs() -> None:
    """The loop on the AMD EPYC VM (2026-12-03, launches spreading 11-26%) left 5 of its
    12 head-to-heads open after 20 minutes. The bound for one more is at least the
    cheapest open pair's alone, and never more than what the decided table's
    pair-by-pair column projects for it (whole launches, at its looks). Its 124 launches
    are tests/data/decide-loop-2026-12-03: the records of the decide-vs-fixed study
    (results/reference/decide-vs-fixed-2026-12-03-giveup/pass1/decide at eab45de) with
    only the fields a decision reads."""
    folder = ROOT / "tests/data/decide-loop-2026-12-03"
    df = synced_launches(folder)
    frames = [g for _, g in df.groupby("model")]
    r = decisions.reach(frames, 0.05)
    assert (r.decided, r.total) == (7, 12)
    assert r.more_s is not None and r.all_s is not None
    assert all(x <= y for x, y in zip(r.more_s, r.more_s[1:], strict=False))
    assert all(x <= y for x, y in zip(r.all_s, r.all_s[1:], strict=False))
    projected = []
    for _, gdf in df.groupby("model"):
        ok = decisions.usable(gdf)
        sides = decisions.Sides(ok)
        for p in decisions.pairs(ok):
            if (
                p.what == "head to head"
                and decisions.decide(ok, p, 0.05, sides).outcome == "undecided"
            ):
                a, b = sides(p.a_rows), sides(p.b_rows)
                need = sq.more_launches(a, b, 0.05)
                if need is not None:
                    projected.append(need[0] * a.launch_s + need[1] * b.launch_s)
    assert projected and 0 < r.more_s[8] <= min(projected)
    assert r.all_s[10] > 20 * 60  # at the loop's measured values: not within its 20 minutes


def test_a_pair_already_narrow_enough_still_needs_its_next_look() -> None:
    """Four launches a side and a spread that already fits: the looks at 6 launches did
    not decide it, so it is decided no sooner than at 9, one launch of the cheaper cell
    away. Counted from three launches a cell (`have`), no look has been taken."""
    cells = [_cell(0.001, 4, 5.0), _cell(0.001, 4, 7.0, 0.2)]
    pair = reach.open_pair(cells, 0, 1, 0.05)
    assert reach.least_seconds(cells, [pair]) == pytest.approx(5.0, rel=1e-3)
    assert reach.least_seconds(cells, [pair], have=[3, 3]) == pytest.approx(0.0, abs=1e-6)
    late = [_cell(0.001, 50, 5.0), _cell(0.001, 50, 7.0, 0.2)]  # past the last look
    assert reach.least_seconds(late, [reach.open_pair(late, 0, 1, 0.05)]) == math.inf


def _cheapest_sequence(cells: list[sq.Side], pairs: list[tuple[int, int]]) -> float:
    """The exact least seconds of launches after which the loop's own replay decides every
    pair: Dijkstra over launch counts (and the pairs decided so far), each cell's launches
    having exactly its measured mean and variance at every count, each pair looked at
    when its total reaches a look past its launches so far, at the looks' confidence."""
    mean = [float(np.mean(c.logs)) for c in cells]
    var = [reach.spread(c) for c in cells]
    start = tuple(c.n for c in cells)
    after = [start[a] + start[b] for a, b in pairs]
    full = (1 << len(pairs)) - 1

    def decides(a: int, b: int, na: int, nb: int) -> bool:
        sa, sb = var[a] / na, var[b] / nb
        df = (sa + sb) ** 2 / (sa**2 / (na - 1) + sb**2 / (nb - 1))
        half = stats.t_quantile(0.5 + sq.confidence() / 2, max(df, 1.0)) * math.sqrt(sa + sb)
        d = mean[a] - mean[b]
        return sq.outcome(math.exp(d - half), math.exp(d + half), 0.05) != sq.UNDECIDED

    seen = {(start, 0): 0.0}
    queue = [(0.0, start, 0)]
    while queue:
        cost, counts, done = heapq.heappop(queue)
        if done == full:
            return cost
        if cost > seen[counts, done]:
            continue
        for i, cell in enumerate(cells):
            now = tuple(n + (k == i) for k, n in enumerate(counts))
            more = done
            for p, (a, b) in enumerate(pairs):
                total = now[a] + now[b]
                if more >> p & 1 or i not in (a, b) or total not in sq.LOOKS:
                    continue
                if total > after[p] and min(now[a], now[b]) >= sq.MIN_SIDE:
                    more |= decides(a, b, now[a], now[b]) << p
            if any(
                not more >> p & 1 and now[a] + now[b] >= sq.LOOKS[-1]
                for p, (a, b) in enumerate(pairs)
            ):
                continue  # a pair past its last look, undecided: a dead end
            if cost + cell.launch_s < seen.get((now, more), math.inf):
                seen[now, more] = cost + cell.launch_s
                heapq.heappush(queue, (cost + cell.launch_s, now, more))
    return math.inf


@pytest.mark.parametrize(
    ("sds", "centres", "costs", "made"),
    [
        ((0.02, 0.03, 0.03), (0.0, 0.03, -0.035), (5.0, 6.0, 4.0), (3, 3, 3)),
        ((0.03, 0.02, 0.04), (0.0, -0.025, 0.04), (9.0, 3.0, 5.0), (4, 3, 5)),
        ((0.015, 0.03, 0.025), (0.0, 0.02, 0.028), (4.0, 8.0, 6.0), (3, 5, 4)),
    ],
)
def test_no_launch_sequence_the_loop_would_decide_costs_less_than_the_bound(
    sds: tuple[float, ...],
    centres: tuple[float, ...],
    costs: tuple[float, ...],
    made: tuple[int, ...],
) -> None:
    """Two pairs sharing a cell, and the triangle of three: the exact cheapest launch
    sequence under which the loop's replay decides them all costs at least the bound."""
    cells = [_cell(sd, n, c, m) for sd, n, c, m in zip(sds, made, costs, centres, strict=True)]
    for ends in ([(0, 1), (0, 2)], [(0, 1), (0, 2), (1, 2)]):
        bound = reach.least_seconds(cells, [reach.open_pair(cells, a, b, 0.05) for a, b in ends])
        exact = _cheapest_sequence(cells, ends)
        assert 0 < bound <= exact + 1e-9 < math.inf, (ends, bound, exact)


def test_the_barrier_steps_on_the_constraints_exact_derivatives() -> None:
    """Newton's steps need each constraint's gradient and curvature, and the barrier's
    Hessian built from them: a wrong one still ends at a valid bound, only slowly, so
    check them against finite differences (a triangle of pairs: every cell in two)."""
    problem = reach.Problem(
        c=np.array([5.0, 6.0, 4.0]),
        n=np.array([3.0, 4.0, 3.0]),
        floor=np.array([3.0, 4.0, 3.0]),
        v=np.array([0.04, 0.09, 0.02]) ** 2,
        ends=[(0, 1), (0, 2), (1, 2)],
        h=np.array([4e-4, 3e-4, 5e-4]),
        looks=np.array([9.0, 12.0, 10.0]),
    )
    x, step = np.array([7.0, 11.0, 5.5]), 1e-4
    vals, grads, curve = problem._constraints(x)
    assert vals.shape == (2 * 3 + 3,) and grads.shape == (9, 3) and curve.shape == (3, 3)
    for i in range(3):
        e = np.zeros(3)
        e[i] = step
        up, down = problem._constraints(x + e)[0], problem._constraints(x - e)[0]
        np.testing.assert_allclose(grads[:, i], (up - down) / (2 * step), rtol=1e-6, atol=1e-12)
        second = (up[:3] - 2 * vals[:3] + down[:3]) / step**2
        np.testing.assert_allclose(curve[:, i], second, rtol=1e-4, atol=1e-12)
    # and the barrier's gradient and Hessian, as the Newton steps assemble them, at a
    # strictly feasible point
    t, x = 50.0, np.array([20.0, 40.0, 10.0])
    assert np.all(problem._constraints(x)[0] < 0)
    grad, hess = problem.newton_terms(x, t)
    for i in range(3):
        e = np.zeros(3)
        e[i] = step
        slope = (problem.barrier(x + e, t) - problem.barrier(x - e, t)) / (2 * step)
        assert grad[i] == pytest.approx(slope, rel=1e-5)
        turn = (problem.newton_terms(x + e, t)[0] - problem.newton_terms(x - e, t)[0]) / (2 * step)
        np.testing.assert_allclose(hess[:, i], turn, rtol=1e-5)
