"""Decided, not only measured: noise at each level, sequential decisions and their errors.

The statistics are checked on constructed data and by simulation; the loop
(`bench run --decide-at`) with real launches of two engines."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import numpy as np
import pandas as pd
import pytest

from bench import cli, records
from bench.decide import pairs, simulate
from bench.decide import rule as sq
from bench.measure import stats
from bench.records import LoadedRecord
from bench.tables import decided, noise
from bench.tables.frame import frame

ROOT = Path(__file__).resolve().parent.parent


def short_run(tmp_path: Path, *flags: str, timeout: int) -> subprocess.CompletedProcess[str]:
    """`bench run` of short mlp runs (one epoch, no twins) into `tmp_path`, with `flags`."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "run",
            "--models",
            "mlp",
            "--epochs",
            "1",
            "--no-comm-cost",
            "--results",
            str(tmp_path),
            "--no-compare",
            *flags,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _side(values: list[float], launch_s: float = 1.0) -> sq.Side:
    return sq.Side(tuple(math.log(v) for v in values), launch_s)


def test_a_clear_difference_is_decided_at_the_first_look() -> None:
    a = _side([100, 101, 99, 100.5, 99.5])
    b = _side([80, 81, 79, 80.5, 79.5])
    d = sq.decide(a, b, ["a", "b"] * 5, precision=0.05)
    assert d.outcome == sq.DIFFERENT and d.look == 1 and d.launches == 6
    assert d.low is not None and d.low > 1.15 and d.ratio == pytest.approx(1.25, rel=0.01)


def test_a_look_sees_only_the_launches_before_it() -> None:
    """The first three launches a side are far apart; later ones agree. Replayed in
    order, no look (at 6, 9 and 13 launches) decides: each sees the far-apart ones."""
    a = _side([100, 140, 70, 100, 100, 100, 100, 100])
    b = _side([100, 70, 140, 100, 100, 100, 100, 100])
    d = sq.decide(a, b, ["a", "b"] * 8, precision=0.05)
    assert d.outcome == sq.UNDECIDED and d.look == 3 and d.launches == 16
    # the same launches with the steady ones first decide "equivalent" at once
    steady = sq.decide(
        _side([100, 100.2, 99.8, 100.1, 140]),
        _side([100, 99.9, 100.1, 100.2, 70]),
        ["a", "b"] * 5,
        precision=0.05,
    )
    assert steady.outcome == sq.EQUIVALENT and steady.look == 1


def test_a_side_of_one_launch_is_undecided_with_its_ratio_and_no_warning() -> None:
    """A pair with no look yet (one side failed twice, say) still reads a ratio in the
    report: the sides' centres, with no spread computed from a single launch."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "degrees of freedom <= 0" fails the test
        d = sq.decide(_side([120]), _side([100, 101, 99]), ["b", "b", "a", "b"], 0.05)
    assert d.outcome == sq.UNDECIDED and d.low is None and d.high is None
    assert d.ratio == pytest.approx(1.2, rel=1e-3) and d.launches == 4


def test_equivalence_needs_the_whole_interval_inside_the_precision() -> None:
    assert sq.outcome(0.97, 1.03, 0.05) == sq.EQUIVALENT
    assert sq.outcome(0.97, 1.06, 0.05) == sq.UNDECIDED
    assert sq.outcome(1.01, 1.04, 0.05) == sq.DIFFERENT  # excludes 1: a small difference
    assert sq.outcome(0.90, 0.99, 0.05) == sq.DIFFERENT


def test_launches_go_where_they_are_cheaper_by_the_square_root_of_cost() -> None:
    cheap, dear = _side([1.0, 1.1, 0.9], 1.0), _side([1.0, 1.1, 0.9], 4.0)
    n = {"a": cheap.n, "b": dear.n}
    for _ in range(30):
        side = sq.next_side(
            sq.Side(cheap.logs[:1] * n["a"], 1.0), sq.Side(dear.logs[:1] * n["b"], 4.0)
        )
        n[side] += 1
    assert n["a"] / n["b"] == pytest.approx(2.0, abs=0.2)  # sqrt(4 / 1)


def _exactly(mean: float, sd: float, n: int, seed: int) -> tuple[float, ...]:
    """n values with exactly this sample mean and standard deviation."""
    z = np.random.default_rng(seed).standard_normal(n)
    z = (z - z.mean()) / z.std(ddof=1)
    return tuple(float(x) for x in mean + sd * z)


def test_more_launches_are_what_a_later_look_needs_at_the_measured_variance() -> None:
    """The projection, checked where it is exact: Welch's intervals on launches with
    exactly the measured means and variances."""
    a = sq.Side(_exactly(math.log(1.10), 0.1, 5, 1), 1.0)
    b = sq.Side(_exactly(0.0, 0.1, 5, 2), 1.0)
    need = sq.more_launches(a, b, 0.05)
    assert need is not None and sum(need) > 0
    assert a.n + b.n + sum(need) in sq.LOOKS
    # launches with exactly the measured means and variances decide at that look...
    na, nb = a.n + need[0], b.n + need[1]
    more_a, more_b = _exactly(math.log(1.10), 0.1, na, 3), _exactly(0.0, 0.1, nb, 4)
    _, lo, hi = stats.welch_log_ratio(more_a, more_b, 1.0, sq.confidence())
    assert sq.outcome(lo, hi, 0.05) == sq.DIFFERENT
    # ...and not at the look before it
    fewer = [n for n in sq.LOOKS if n < na + nb][-1] - (a.n + b.n)
    if fewer > 0:
        fa, fb = a.n + (fewer + 1) // 2, b.n + fewer // 2
        _, lo, hi = stats.welch_log_ratio(more_a[:fa], more_b[:fb], 1.0, sq.confidence())
        assert sq.outcome(lo, hi, 0.05) == sq.UNDECIDED
    # a ratio half-way inside the precision at 15% spread: no look within the schedule
    flat = sq.Side(_exactly(math.log(1.025), 0.15, 5, 5), 1.0)
    assert sq.more_launches(flat, b, 0.05) is None


# The distributions the error rates are checked on: log-normal at this machine's
# 2-worker launch spread, launches with occasional slow outliers (a busy neighbour),
# and the three ddp lenet x2 launches the issue quotes.
DISTRIBUTIONS = {
    "log-normal 15%": np.random.default_rng(1).normal(0, 0.15, 12),
    "outliers": np.concatenate(
        [
            np.random.default_rng(2).normal(0, 0.05, 10),
            np.random.default_rng(3).normal(-0.3, 0.05, 2),
        ]
    ),
    "ddp lenet x2": np.log([11_605, 16_528, 14_341]),
}


@pytest.mark.parametrize("name", DISTRIBUTIONS)
def test_error_rates_stay_within_five_percent_by_simulation(name: str) -> None:
    rates = simulate.simulate(DISTRIBUTIONS[name], 0.05, sequences=10_000)
    print(f"{name}: {rates}")
    assert rates.false_different <= 0.05
    assert rates.false_equivalent <= 0.05


def test_the_simulation_decides_as_the_replay_does() -> None:
    """`outcomes` (the simulation, many pairs at once) and `decide` (what compare and the
    loop use) must settle the same launches the same way: the simulated error rates are
    those of the decisions the suite prints."""
    rng = np.random.default_rng(7)
    half = (sq.LOOKS[-1] + 1) // 2
    spread = rng.choice([0.02, 0.1], (300, 1))
    a = rng.normal(0.0, 1.0, (300, half)) * spread + rng.choice([0.0, 0.05, 0.15], (300, 1))
    b = rng.normal(0.0, 1.0, (300, half)) * spread
    fast = simulate.outcomes(a, b, 0.05)
    order = ["a", "b"] * half
    slow = [
        sq.decide(sq.Side(tuple(a[i]), 1.0), sq.Side(tuple(b[i]), 1.0), order, 0.05).outcome
        for i in range(300)
    ]
    assert len({*slow}) == 3  # the cases cover every outcome
    assert list(fast) == slow


def test_favourable_takes_the_ratio_and_spreads_towards_a_decision() -> None:
    """z = 0 is the measured values; at z > 0 the needed half-width is the widest within
    z standard errors of the ratio (the middle of +-P in logs where they straddle it), and
    each spread is at the low end of its chi-square interval: the Wilson-Hilferty factor
    against scipy's."""
    scipy_stats = pytest.importorskip("scipy.stats")  # scikit-learn's dependency: always here
    d, sa, sb = math.log(1.01), 0.0004, 0.0005  # d +- 1 se: 0.980 to 1.041
    assert sq.favourable(d, sa, sb, 3, 3, 0.05, 0.0) == (sq.needed_half_width(d, 0.05), sa, sb)
    target, fa, fb = sq.favourable(d, sa, sb, 3, 5, 0.05, 1.0)
    # within reach: the ratio with the widest room inside +-5%, a hair below 1
    assert target == pytest.approx(sq.needed_half_width(sq.widest_inside(0.05), 0.05))
    assert target == pytest.approx((math.log(1.05) - math.log(0.95)) / 2)
    for k, f, s in ((2, fa, sa), (4, fb, sb)):
        exact = k / scipy_stats.chi2.ppf(scipy_stats.norm.cdf(1.0), k)
        assert f / s == pytest.approx(exact, rel=0.01)
    # far from 1, the end farther out is the easier one
    far, _, _ = sq.favourable(math.log(1.2), sa, sb, 3, 3, 0.05, 1.0)
    assert far == pytest.approx(math.log(1.2) + math.sqrt(sa + sb))


def test_the_same_looks_at_a_fixed_n_confidence_go_wrong_more_often(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the spending is for: each look at 95% (alpha not divided by the looks)
    calls an A/A pair different far more often than 5%."""
    monkeypatch.setattr(sq, "ALPHA", 0.05 * len(sq.LOOKS))
    assert sq.confidence() == pytest.approx(0.95)
    naive = simulate.simulate(DISTRIBUTIONS["log-normal 15%"], 0.05, sequences=10_000)
    assert naive.false_different > 0.10


def _frame_rows(cells: dict[tuple[str, int], list[tuple[float, float, float]]]) -> pd.DataFrame:
    """Frame-like rows: per launch (throughput, within log var, launch seconds), 50
    windows of 0.1 s each."""
    rows = []
    for (engine, workers), launches in cells.items():
        for tput, var, secs in launches:
            rows.append(
                {
                    "engine": engine,
                    "workers": workers,
                    "single_node_engine": engine,
                    "throughput": tput,
                    "launch_s": secs,
                    "windows": {
                        "n": 50,
                        "log_mean": math.log(tput),
                        "log_var": var,
                        "window_s": 0.1,
                    },
                }
            )
    return pd.DataFrame(rows)


def test_noise_levels_split_the_spread_between_windows_and_launches() -> None:
    tput = [90.0, 100.0, 110.0, 95.0, 105.0]
    df = _frame_rows({("ddp", 1): [(t, 0.01, 25.0) for t in tput]})
    lv = noise.levels(df)
    launch_var = float(np.var(np.log(tput), ddof=1))
    assert lv.within == pytest.approx(0.01)
    assert lv.between == pytest.approx(launch_var - 0.01 / 50)
    assert lv.launch_s == pytest.approx(25.0 - 50 * 0.1)
    assert lv.between is not None
    # Kalibera-Jones: sqrt(c_launch s2_w / (c_window s2_b))
    assert lv.best_windows() == pytest.approx(math.sqrt(20.0 * 0.01 / (0.1 * lv.between)))
    # launches that vary no more than their windows explain: one long launch is best
    flat = noise.levels(_frame_rows({("ddp", 1): [(100.0, 0.5, 25.0), (100.0, 0.5, 25.0)]}))
    assert flat.between == 0 and math.isinf(flat.best_windows() or 0)


def test_pairs_are_every_two_engines_and_every_efficiency() -> None:
    one = [(100.0, 0.01, 10.0)] * 3
    df = _frame_rows({(e, w): one for e in ("ddp", "horovod", "paddle") for w in (1, 2)})
    names = [p.name for p in pairs.pairs(df)]
    assert names == [
        "ddp / horovod x1",
        "ddp / paddle x1",
        "horovod / paddle x1",
        "ddp / horovod x2",
        "ddp / paddle x2",
        "horovod / paddle x2",
        "ddp x2 efficiency",
        "horovod x2 efficiency",
        "paddle x2 efficiency",
    ]
    table = decided.rows(decided.Readings(df, 0.05))
    # identical launches: every head-to-head equivalent, every efficiency 0.5 (below 1)
    assert set(table["decided"]) == {"equivalent within 5%", "below 1"}
    assert list(table.columns[:3]) == ["workers", "a", "b"]


def test_compare_prints_each_cells_error_rates_on_request(
    capsys: pytest.CaptureFixture[str],
) -> None:
    golden = str(ROOT / "tests" / "data" / "golden.jsonl")
    argv = ["compare", golden, "--show", "error-rates,decided", "--decide-at", "10%", "--wide"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    table = out[out.index("error rates:") :].splitlines()
    # launches are the same on every row: said once under the table
    header = "engine workers false different false equivalent A/A decided"
    assert table[1].split() == header.split()
    cells = table[2 : table.index("  on every row: launches 3")]
    rates = [float(v.rstrip("%")) for line in cells for v in line.split()[2:4]]
    assert len(rates) == 2 * 4  # ddp and horovod at 1 and 2 workers
    assert rates and all(0 <= r <= 5 for r in rates), table
    assert "decided at +-P" in out and "ddp / horovod" not in out


@pytest.mark.parametrize(
    "argv, says",
    [
        (["run", "--budget", "20m", "--dry-run"], "--budget goes with --decide-at"),
        (["run", "--decide-at", "70%", "--dry-run"], "--decide-at must be between 0 and 50%"),
        (["run", "--decide-at", "5%", "--budget", "soon"], "--budget takes a time such as 20m"),
        (["run", "--decide-at", "5%", "--force"], "run it without --force"),
        (["compare", "--decide-at", "five"], "--decide-at takes a share such as 5% or 0.05"),
        (["compare", "--decide-at", "0"], "--decide-at must be between 0 and 50%"),
    ],
)
def test_a_wrong_decide_at_or_budget_is_one_line(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status = cli.main(
        [*argv, *(["--results", str(tmp_path)] if argv[0] == "run" else [str(tmp_path)])]
    )
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1 and says in err, err


@pytest.mark.distributed
def test_a_real_run_adds_launches_until_decided_and_compare_agrees(tmp_path: Path) -> None:
    """ddp against paddle on mlp at one worker, short runs: the first round's three launches
    a side, then one launch a round, exactly those the loop names, until the pair is
    decided or no look could. The first look may already end it: decided on a quiet
    machine, or, beside a busy neighbour (the suite's other process), too noisy for any
    launch to decide within the budget. The rounds are then none, and
    `test_an_undecided_pair_gets_its_next_launch` covers them."""
    proc = short_run(
        tmp_path,
        "--engines",
        "ddp,paddle",
        "--workers",
        "1",
        "--max-steps",
        "20",
        "--decide-at",
        "10%",
        "--budget",
        "2m",  # what is checked is the rounds, not that the pair gets decided
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    status = [ln for ln in proc.stdout.splitlines() if ln.startswith("bench run --decide-at:")]
    assert status, proc.stdout[-3000:]
    rounds = [ln for ln in status if "; next: " in ln]
    recs = [r for r in records.load([tmp_path]).records if r["status"] == "ok"]
    assert len(recs) == 6 + len(rounds), proc.stdout[-3000:]
    if not rounds:  # the loop stopped at its first look, and says why
        first = status[0]
        assert first.startswith("bench run --decide-at: 1 of 1 pairs decided") or (
            first.startswith("bench run --decide-at: 0 of 1 pairs decided")
            and "no more can be decided within the budget: 1 would need more than" in first
        ), first
    repeats = sorted(r["labels"]["repeat"] for r in recs if r["engine"] == "paddle")
    assert len(set(repeats)) == len(repeats)  # every added launch is a new repeat
    table = decided.rows(decided.Readings(frame(recs).pipe(lambda d: d[d["status"] == "ok"]), 0.10))
    final = [ln for ln in status if "pairs decided" in ln][-1]
    settled = (table["decided"] != "undecided").sum()
    assert f"{settled} of 1 pairs decided" in final, (final, table.to_string())
    # an open pair: the last line says what any allocation would need
    reach = "bench run --decide-at: at the measured ratios and spreads, "
    assert status[-1].startswith(reach) == (settled == 0), status


def _launches(ddp: list[float], paddle: list[float], costs: tuple[float, float] = (5.0, 5.0)
) -> pd.DataFrame:  # fmt: skip
    """The frame columns the loop and the decided table read: ddp and paddle mlp x1
    launches of these throughputs, each side's launches costing its seconds."""
    return _engines_launches({"ddp": (ddp, costs[0]), "paddle": (paddle, costs[1])})


def _engines_launches(
    by_engine: dict[str, tuple[Sequence[float], float]], decide_at: float | None = 0.05
) -> pd.DataFrame:
    """mlp x1 launches of each engine: its throughputs and the seconds a launch costs,
    launched by `bench run --decide-at` (read at its looks) unless `decide_at` is None."""
    rows = [
        {
            "engine": e,
            "engine_name": e,
            "aa": "",
            "workers": 1,
            "model": "mlp",
            "single_node_engine": e,
            "throughput": t,
            "launch_s": cost,
            "repeat": i,
            "decide_at": decide_at,
        }
        for e, (tput, cost) in by_engine.items()
        for i, t in enumerate(tput)
    ]
    return pd.DataFrame(rows)


def test_an_undecided_pair_says_the_launches_and_minutes_it_would_need() -> None:
    ok = _launches([100, 120, 85], [80, 95, 70], costs=(6.0, 30.0))
    (pair,) = pairs.pairs(ok)
    sides = pairs.Sides(ok)
    need = sq.more_launches(sides(pair.a_rows), sides(pair.b_rows), 0.05)
    assert need is not None and need[0] > need[1]  # the cheaper side gets more
    (row,) = decided.rows(decided.Readings(ok, 0.05)).to_dict("records")
    minutes = (need[0] * 6.0 + need[1] * 30.0) / 60
    assert row["more launches"] == f"{need[0]} + {need[1]} ({minutes:.1f} min)"
    far = decided.rows(decided.Readings(_launches([100, 130, 80], [95, 125, 85]), 0.05))
    assert list(far["more launches"]) == ["beyond the last look"]


def test_an_undecided_pair_gets_its_next_launch() -> None:
    """The loop's choice on constructed launches: an undecided pair gets one launch, a new
    repeat of one of its cells with that repeat's seed; a decided pair gets none."""
    from bench.contract.spec import RunSpec
    from bench.engines import Engine
    from bench.sweep.cells import plan
    from bench.sweep.config import SweepConfig
    from bench.sweep.until_decided import choose

    cfg = SweepConfig(engines=(Engine.DDP, Engine.PADDLE), workers=(1,), models=("mlp",))
    templates = [c for c in plan(cfg, RunSpec()) if c.repeat == 0]

    chosen, decided, total, _ = choose(_launches([100, 120, 85], [80, 95, 70]), templates, 0.05)
    assert (decided, total, len(chosen)) == (0, 1, 1)
    cell = chosen[0].cell
    assert cell.engine in (Engine.DDP, Engine.PADDLE) and cell.repeat == 3
    assert cell.spec.seed == RunSpec().seed + 3 and cell.spec.model == "mlp"
    chosen, decided, _, _ = choose(_launches([100, 101, 99], [50, 51, 49]), templates, 0.05)
    assert chosen == [] and decided == 1
    # 9% apart at 3 a side, 9% spread: out of reach at the measured ratio and spreads, not
    # at ones a standard error more favourable, so the pair gets its launch
    close = _launches([100, 110, 92], [97, 104, 92])
    (pair,) = pairs.pairs(close)
    sides = pairs.Sides(close)
    assert sq.more_launches(sides(pair.a_rows), sides(pair.b_rows), 0.05) is None
    chosen, decided, _, _ = choose(close, templates, 0.05)
    assert len(chosen) == 1 and decided == 0
    # close means at a 20% spread: at 3 a side a ratio of 1.2 is not ruled out, so the
    # pair gets launches; at 12 a side no plausible ratio and spread is within reach of a
    # look, so no launch is spent on it
    chosen, _, _, _ = choose(_launches([100, 130, 80], [95, 125, 85]), templates, 0.05)
    assert len(chosen) == 1
    chosen, decided, _, _ = choose(
        _launches([100, 130, 80] * 4, [95, 125, 85] * 4), templates, 0.05
    )
    assert chosen == [] and decided == 0


def test_a_pair_within_reach_at_its_measured_values_goes_first() -> None:
    """Three engines: horovod / paddle is within reach at its measured values (18 + 18
    launches); ddp against either only at a ratio and spreads a standard error more
    favourable, where it would need fewer (7 + 6). The launch goes to the first: the
    favourable count is a hope, not a cost."""
    from bench.contract.spec import RunSpec
    from bench.engines import Engine
    from bench.sweep.cells import plan
    from bench.sweep.config import SweepConfig
    from bench.sweep.until_decided import choose

    by_engine = {"ddp": [100, 110, 92], "paddle": [97, 104, 92], "horovod": [98, 101, 95]}
    ok = _engines_launches({e: (tput, 5.0) for e, tput in by_engine.items()})
    sides = pairs.Sides(ok)
    need = {
        p.name: (
            sq.more_launches(sides(p.a_rows), sides(p.b_rows), 0.05),
            sq.more_launches(sides(p.a_rows), sides(p.b_rows), 0.05, optimism=sq.GIVE_UP_Z),
        )
        for p in pairs.pairs(ok)
    }
    hopeful = [name for name, (measured, _) in need.items() if measured is None]
    assert sorted(hopeful) == ["ddp / horovod x1", "ddp / paddle x1"]
    within = need["horovod / paddle x1"]
    assert within[0] is not None and all(
        sum(within[0]) > sum(need[name][1] or (99, 99)) for name in hopeful
    )
    cfg = SweepConfig(engines=tuple(Engine(e) for e in by_engine), workers=(1,), models=("mlp",))
    templates = [c for c in plan(cfg, RunSpec()) if c.repeat == 0]
    chosen, decided, total, _ = choose(ok, templates, 0.05)
    assert (decided, total) == (0, 3)
    assert [c.pair for c in chosen] == ["horovod / paddle x1"]


def test_a_pair_the_budget_left_cannot_settle_gives_way() -> None:
    """The same three engines at 5 s a launch. horovod / paddle needs 18 + 18 launches
    at its measured values (180 s), 11 + 11 at favourable ones; each ddp pair 7 + 6,
    only at favourable ones. With 180 s left horovod / paddle goes first; with less,
    it is only a hope like the others and the cheapest hope goes first; with less than
    its favourable 110 s it is counted past the budget, and with less than any pair's
    favourable launches no launch is spent at all."""
    from bench.contract.spec import RunSpec
    from bench.engines import Engine
    from bench.sweep.cells import plan
    from bench.sweep.config import SweepConfig
    from bench.sweep.until_decided import _why_none, choose

    by_engine = {"ddp": [100, 110, 92], "paddle": [97, 104, 92], "horovod": [98, 101, 95]}
    ok = _engines_launches({e: (tput, 5.0) for e, tput in by_engine.items()})
    sides = pairs.Sides(ok)
    seconds = {}  # pair: (measured, favourable) seconds of launches, None out of reach
    for p in pairs.pairs(ok):
        a, b = sides(p.a_rows), sides(p.b_rows)
        needs = (
            sq.more_launches(a, b, 0.05),
            sq.more_launches(a, b, 0.05, optimism=sq.GIVE_UP_Z),
        )
        seconds[p.name] = tuple(None if n is None else 5.0 * sum(n) for n in needs)
    within, ddp = "horovod / paddle x1", ["ddp / horovod x1", "ddp / paddle x1"]
    (measured, hope), cheapest = seconds[within], min(seconds[n][1] or 0 for n in ddp)
    assert measured is not None and hope is not None
    assert all(seconds[n][0] is None for n in ddp) and 0 < cheapest < hope < measured
    cfg = SweepConfig(engines=tuple(Engine(e) for e in by_engine), workers=(1,), models=("mlp",))
    templates = [c for c in plan(cfg, RunSpec()) if c.repeat == 0]

    def pairs_chosen(left_s: float) -> tuple[list[str], int]:
        chosen, decided, total, past_budget = choose(ok, templates, 0.05, left_s)
        assert (decided, total) == (0, 3)
        return [c.pair for c in chosen], past_budget

    assert pairs_chosen(measured) == ([within], 0)
    (first,), past = pairs_chosen(measured - 1)
    assert first in ddp and past == 0
    (first,), past = pairs_chosen(hope - 1)
    assert first in ddp and past == 1
    assert pairs_chosen(cheapest - 1) == ([], 3)
    why = _why_none(0, 3, 3, cheapest - 1)  # what the loop then prints as it stops
    assert why.startswith("no more can be decided within the budget: 3 would need more")
    assert why.endswith("even at ratios and spreads a standard error more favourable than measured")


def test_an_aa_sweep_runs_every_cell_as_two_engines() -> None:
    from bench.contract.spec import RunSpec
    from bench.engines import Engine
    from bench.sweep.cells import plan
    from bench.sweep.config import SweepConfig

    cfg = SweepConfig(engines=(Engine.DDP,), workers=(1, 2), models=("mlp",), repeats=2, aa=True)
    cells = plan(cfg, RunSpec())
    # A then B for every cell of every repeat, each its own cell for resume
    assert [c.label for c in cells if c.spec.grad_sync][:4] == ["A", "B", "A", "B"]
    assert len({c.key("env") for c in cells}) == len(cells)
    plain = plan(SweepConfig(engines=(Engine.DDP,), workers=(1,), models=("mlp",)), RunSpec())
    assert all(c.label == "" for c in plain) and "as A" in cells[0].name
    # an unlabelled cell keeps the key it had before A/A existed
    assert plain[0].key("env") == dataclasses.replace(plain[0], label="").key("env")


def test_the_sides_of_an_aa_experiment_read_as_two_engines() -> None:
    golden = records.load([ROOT / "tests" / "data" / "golden.jsonl"]).records
    ddp = [r for r in golden if r["engine"] == "ddp" and r["world_size"] == 1]
    sides = []
    for i, r in enumerate(ddp * 2):
        sides.append({**r, "labels": {**(r.get("labels") or {}), "aa": "AB"[i % 2]}})
    df = frame(cast(list[LoadedRecord], sides))
    assert set(df["engine"]) == {"ddp~A", "ddp~B"} and set(df["engine_name"]) == {"ddp"}
    found = pairs.pairs(df[df["status"] == "ok"])
    assert [p.name for p in found] == ["ddp~A / ddp~B x1"]


@pytest.mark.distributed
def test_a_real_aa_experiment_is_decided_by_the_same_loop(tmp_path: Path) -> None:
    """One engine under two names: the loop treats A and B as two engines, and whatever
    it concludes, 'different' would be an error (the simulation bounds it by 5%)."""
    proc = short_run(
        tmp_path,
        "--aa",
        "--engines",
        "ddp",
        "--workers",
        "1",
        "--max-steps",
        "20",
        "--decide-at",
        "10%",
        "--budget",
        "75s",
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = [r for r in records.load([tmp_path]).records if r["status"] == "ok"]
    assert {r["labels"]["aa"] for r in recs} == {"A", "B"} and len(recs) >= 6
    table = decided.rows(decided.Readings(frame(recs), 0.10))
    assert list(table["a"]) == ["ddp~A"] and list(table["b"]) == ["ddp~B"]
    status = [ln for ln in proc.stdout.splitlines() if ln.startswith("bench run --decide-at:")]
    final = [ln for ln in status if "pairs decided" in ln]
    assert final and "of 1 pairs decided" in final[-1], proc.stdout[-2000:]


@pytest.mark.parametrize("sign", [1, -1])
def test_the_needed_half_width_is_what_the_interval_needs_on_either_side(sign: int) -> None:
    """A pair reading 0.976 (or 1.024) is equivalent within 5% once its interval's
    half-width is at most the needed one, and not just past it: the room to the nearer
    edge of [0.95, 1.05], wider below 1 than above in logs."""
    d = sign * 0.024
    half = sq.needed_half_width(d, 0.05)
    for h, reads in ((half * 0.999, sq.EQUIVALENT), (half * 1.001, sq.UNDECIDED)):
        assert sq.outcome(math.exp(d - h), math.exp(d + h), 0.05) == reads, (d, h)
    assert sq.needed_half_width(-0.024, 0.05) > sq.needed_half_width(0.024, 0.05)
