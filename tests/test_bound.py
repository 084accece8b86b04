"""What would settle the rest: the lower bound on the launches that decide more pairs.

The bound (bench/decide/bound.py) is checked against the exact cheapest launch sequence
under which the loop's own replay decides a pair (Dijkstra over launch counts), against
the loop's projection, at the edges of reach; and the table and line that report it, on
constructed launches and on the committed reference sweep."""

from __future__ import annotations

import heapq
import math
from pathlib import Path

import numpy as np
import pytest

from bench.decide import bound, pairs
from bench.decide import rule as sq
from bench.measure import stats
from bench.tables import decided
from bench.tables.frame import synced_launches

from .test_sequential import _engines_launches

ROOT = Path(__file__).resolve().parent.parent


def _cell(sd: float, n: int, launch_s: float, centre: float = 0.0) -> sq.Side:
    """n launches whose log throughputs have exactly this mean and sample sd."""
    z = np.random.default_rng(n).standard_normal(n)
    z = (z - z.mean()) / z.std(ddof=1)
    return sq.Side(tuple(centre + sd * z), launch_s)


def _cheapest_sequence(cells: list[sq.Side], ends: list[tuple[int, int]]) -> float:
    """The exact least seconds of launches after which the loop's own replay decides every
    pair: Dijkstra over launch counts (and the pairs decided so far), each cell's launches
    having exactly its measured mean and variance at every count, each pair looked at
    when its total reaches a look past its launches so far, at the looks' confidence."""
    mean = [float(np.mean(c.logs)) for c in cells]
    var = [float(np.var(c.logs, ddof=1)) for c in cells]
    start = tuple(c.n for c in cells)
    after = [start[a] + start[b] for a, b in ends]
    full = (1 << len(ends)) - 1

    def decides(a: int, b: int, na: int, nb: int) -> bool:
        sa, sb = var[a] / na, var[b] / nb
        df = float(stats.welch_df(sa, sb, na, nb))
        half = stats.t_quantile(0.5 + sq.confidence() / 2, df) * math.sqrt(sa + sb)
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
            for p, (a, b) in enumerate(ends):
                total = now[a] + now[b]
                if more >> p & 1 or i not in (a, b) or total not in sq.LOOKS:
                    continue
                if total > after[p] and min(now[a], now[b]) >= sq.MIN_SIDE:
                    more |= decides(a, b, now[a], now[b]) << p
            if any(
                not more >> p & 1 and now[a] + now[b] >= sq.LOOKS[-1]
                for p, (a, b) in enumerate(ends)
            ):
                continue  # a pair past its last look, undecided: a dead end
            if cost + cell.launch_s < seen.get((now, more), math.inf):
                seen[now, more] = cost + cell.launch_s
                heapq.heappush(queue, (cost + cell.launch_s, now, more))
    return math.inf


@pytest.mark.parametrize("d", [-0.024, 0.024, -0.045, 0.06])
def test_no_launch_sequence_the_loop_would_decide_costs_less_than_the_bound(d: float) -> None:
    """Launches with exactly the measured means and spreads (3% a side, 3 + 3 made, 5 s
    and 7 s a launch): the cheapest sequence the loop's own replay decides costs at least
    the bound, and not much more (the bound differs only by Welch's degrees of freedom
    below L - 2). Ratios below and above 1, where the room inside +-5% is to different
    edges."""
    cells = [_cell(0.03, 3, 5.0, d), _cell(0.03, 3, 7.0)]
    low = bound.seconds_more(cells[0], cells[1], 0.05)
    exact = _cheapest_sequence(cells, [(0, 1)])
    assert 0 < low <= exact < math.inf
    assert low >= 0.5 * exact


@pytest.mark.parametrize(
    ("sds", "centres", "costs", "made"),
    [
        ((0.02, 0.03, 0.03), (0.0, 0.03, -0.035), (5.0, 6.0, 4.0), (3, 3, 3)),
        ((0.03, 0.02, 0.04), (0.0, -0.025, 0.04), (9.0, 3.0, 5.0), (4, 3, 5)),
    ],
)
def test_pairs_sharing_a_cell_need_at_least_the_largest_of_their_bounds(
    sds: tuple[float, ...],
    centres: tuple[float, ...],
    costs: tuple[float, ...],
    made: tuple[int, ...],
) -> None:
    """Two pairs sharing a cell, and the triangle of three: the exact cheapest sequence
    that decides them all costs at least each pair's own bound."""
    cells = [_cell(sd, n, c, m) for sd, n, c, m in zip(sds, made, costs, centres, strict=True)]
    for ends in ([(0, 1), (0, 2)], [(0, 1), (0, 2), (1, 2)]):
        own = [bound.seconds_more(cells[a], cells[b], 0.05) for a, b in ends]
        assert bound.least_seconds(own)[-1] == max(own)
        assert 0 < max(own) <= _cheapest_sequence(cells, ends) < math.inf


def test_the_bound_never_exceeds_what_the_loop_projects() -> None:
    """For one pair, the loop's projection (its own allocation, at its looks) costs at
    least the bound. Random pairs, of which the loop can project at least ten."""
    projected = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        a, b = (
            _cell(rng.uniform(0.01, 0.12), int(rng.integers(3, 12)), rng.uniform(3, 30), c)
            for c in (0.0, rng.uniform(-0.1, 0.1))
        )
        need = sq.more_launches(a, b, 0.05)
        if need is None:
            assert bound.seconds_more(a, b, 0.05) >= 0
            continue
        projected += 1
        assert bound.seconds_more(a, b, 0.05) <= sq.seconds(need, a, b) + 1e-9, seed
    assert projected >= 10


def test_a_pair_too_noisy_for_the_last_look_is_out_of_reach() -> None:
    """The edge: at 94 launches split evenly, the half-width is t(92) 2 sd / sqrt(94);
    the ratio 1.01 needs log 1.05 - 0.01, which an sd near 0.067 a side meets."""
    far = [_cell(0.20, 5, 5.0), _cell(0.20, 5, 5.0, 0.01)]
    assert sq.more_launches(far[0], far[1], 0.05) is None
    assert bound.seconds_more(far[0], far[1], 0.05) == math.inf
    target = math.log(1.05) - 0.01
    t_last = stats.t_quantile(0.5 + sq.confidence() / 2, sq.LOOKS[-1] - 2)
    edge = target * math.sqrt(sq.LOOKS[-1]) / t_last / 2
    assert edge == pytest.approx(0.067, abs=1e-3)
    for sd, reachable in ((edge * 1.02, False), (edge * 0.98, True)):
        a, b = _cell(sd, 5, 5.0), _cell(sd, 5, 5.0, -0.01)
        assert math.isfinite(bound.seconds_more(a, b, 0.05)) == reachable


def test_a_pair_already_narrow_enough_still_needs_its_next_look() -> None:
    """Four launches a side and a spread that already fits: the look at 6 launches did
    not decide it, so it is decided no sooner than at 9, one launch of the cheaper cell
    away; past the last look, never."""
    a, b = _cell(0.001, 4, 5.0), _cell(0.001, 4, 7.0, 0.2)
    assert bound.seconds_more(a, b, 0.05) == pytest.approx(5.0)
    late = _cell(0.001, 50, 5.0), _cell(0.001, 50, 7.0, 0.2)
    assert bound.seconds_more(*late, 0.05) == math.inf


def test_the_report_says_what_any_allocation_would_need() -> None:
    """Three engines at one worker count, three launches each: ddp and horovod 3% apart
    at a 2% spread, paddle far from both (decided at the first look). The line counts
    from the decided and names the least minutes: the pair's own bound."""
    ok = _engines_launches(
        {
            "ddp": ([100, 102, 98], 5.0),
            "horovod": ([97, 99, 95], 6.0),
            "paddle": ([60, 61, 59], 4.0),
        }
    )
    r = decided.reach([decided.Readings(ok, 0.05)])
    assert (r.decided, r.total) == (2, 3)
    sides = pairs.Sides(ok)
    (pair,) = [p for p in pairs.pairs(ok) if p.name == "ddp / horovod x1"]
    alone = bound.seconds_more(sides(pair.a_rows), sides(pair.b_rows), 0.05)
    assert r.more_s == [alone] and 0 < alone < math.inf
    line = decided.reach_line(r)
    assert f"{alone / 60:.1f} more minutes to decide 3 of 3 head-to-heads" in line
    noisy = _engines_launches(
        {"ddp": ([100, 130, 80] * 4, 5.0), "paddle": ([95, 125, 85] * 4, 5.0)}
    )
    assert decided.reach_line(decided.reach([decided.Readings(noisy, 0.05)])).endswith(
        "no allocation decides another head-to-head within the looks"
    )
    done = _engines_launches({"ddp": ([100, 101, 99], 5.0), "paddle": ([50, 51, 49], 5.0)})
    assert decided.reach_line(decided.reach([decided.Readings(done, 0.05)])) == ""


def test_the_reference_sweep_shows_what_would_settle_its_open_pairs() -> None:
    """lenet in the committed reference (fixed repeats, read with one look) leaves 1 of
    its 6 head-to-heads open at 5 launches a cell; read at the loop's looks, 3: the bound
    for each count is at most what the decided table's pair-by-pair column projects for
    as many of the cheapest pairs."""
    df = synced_launches(ROOT / "results/reference/cpu-2core-digits")
    lenet = df[df["model"] == "lenet"]
    r = decided.reach([decided.Readings(lenet, 0.05)])
    assert (r.decided, r.total) == (5, 6) and len(r.more_s) == 1
    lenet = lenet.assign(decide_at=0.05)  # as if the loop had launched them
    r = decided.reach([decided.Readings(lenet, 0.05)])
    assert (r.decided, r.total) == (3, 6)
    assert r.more_s == sorted(r.more_s) and len(r.more_s) == 3
    sides = pairs.Sides(lenet)
    projected = []
    for p in pairs.pairs(lenet):
        if p.what == "head to head" and pairs.decide(p, 0.05, sides).outcome == sq.UNDECIDED:
            a, b = sides(p.a_rows), sides(p.b_rows)
            need = sq.more_launches(a, b, 0.05)
            assert need is not None
            projected.append(sq.seconds(need, a, b))
    assert r.more_s[0] > 0
    assert all(b <= p for b, p in zip(r.more_s, sorted(projected), strict=True))
