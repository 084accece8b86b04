"""The scaling model (bench/predict) on synthetic records with a known answer.

Each term of the model has a case worked by hand: latency and bandwidth each from the
sizes that identify them, the latency split from two worker counts, intervals over
runs as units, the CPU communication takes from shared cores, a fully hidden
communication reported as the bound it is, and the bytes and batch the model uses.
"""

from __future__ import annotations

import dataclasses
import math
import uuid
from typing import Any, cast

import numpy as np
import pytest

import models
from bench import cli, predict, records
from bench.cli.common import EXIT_BAD_INPUT
from bench.contract import data
from bench.engines import registry
from bench.measure import stats
from bench.records import schema
from bench.records.types import LoadedRecord
from bench.render import formats, html
from bench.tables import frame

GRAD = 109386 * 4  # mlp's float32 parameters on 1x28x28 inputs, 10 classes
ALPHA = 2e-4  # the 2-worker all-reduce latency: two ring steps of 1e-4 s
RATE0 = 1_000_000_000  # the fitted link, bit/s
BUSBW = 0.8 * RATE0 / 8  # its collectives reach 80% of the wire, bytes/s
COMPUTE = 0.010
SYNC = 0.013  # 3 ms of the step is exposed communication


def _train(world: int, step_s: float, *, sync: bool = True, rate: int | None = RATE0, windows: int = 5,
           spread: float = 0.0, worker_cores: float | None = None, earlier_link: bool = False,
           **spec: Any) -> LoadedRecord:  # fmt: skip
    per = 32
    steps = step_s * (1 + spread * np.linspace(-1, 1, windows))
    rec: dict[str, Any] = {
        "schema_version": 2,
        "run_id": uuid.uuid4().hex,
        "status": "ok",
        "kind": "train",
        "engine": "ddp",
        "world_size": world,
        "spec": {
            "model": "mlp",
            "dataset": "digits",
            "batch_size": per,
            "bucket_mb": 25.0,
            "grad_sync": sync,
            "seed": 0,
            "scaling": "weak",
            "threads": 1,
            **spec,
        },
        "per_worker_batch": per,
        "global_batch": per * world,
        "window_throughput": [per * world / s for s in steps],
        "throughput": per * world / step_s,
        "dataset": {"input_shape": [1, 28, 28]},
        # namespaces: one worker a host, every host on this 2-CPU machine
        "cpu_budget": {
            "workers_on_host": 1 if rate else world,
            "threads_per_worker": 1,
            "usable_cpus": 2,
        },
    }
    if rate:
        rec["link"] = _link(rate, earlier=earlier_link)
    if worker_cores is not None:
        # as a run bench launched records it: every rank reports the whole run's cores
        # on its machine (here all `world` workers: one machine, or namespaces of one)
        rec["labels"] = {"attempt": "a1"}
        rec["hosts"] = ["vm"] * world
        rec["contention"] = [{"own_cpu_cores": worker_cores * world}] * world
    return cast(LoadedRecord, rec)


def _collective(rate: int | None = RATE0, busbw: float = BUSBW, world: int = 2, latency: float = ALPHA,
                sizes: tuple[int, ...] = (4096, 2**20, 4 * 2**20)) -> LoadedRecord:  # fmt: skip
    factor = 2 * (world - 1) / world
    rec: dict[str, Any] = {
        "kind": "collective",
        "status": "ok",
        "engine": "ddp",
        "world_size": world,
        "run_id": uuid.uuid4().hex,
        "results": [{"bytes": s, "latency_s": latency + s * factor / busbw} for s in sizes],
    }
    if rate:
        rec["link"] = _link(rate)
    return cast(LoadedRecord, rec)


def _link(rate: int, *, earlier: bool = False) -> dict[str, Any]:
    """An emulated link as bench/launch/netns.py records it; `earlier`: as the shaping
    before the MTU was recorded did (a 67,584-byte bucket at line speed, no `mtu`)."""
    if earlier:
        return {"rate_bps": rate, "emulated": True, "qdisc": "tbf", "burst_bytes": 67_584}
    return {"rate_bps": rate, "emulated": True, "qdisc": "tbf", "burst_bytes": 8028, "mtu": 4000}


def _measured(**kw: Any) -> list[LoadedRecord]:
    return [_train(2, SYNC, **kw), _train(2, COMPUTE, sync=False, **kw), _collective()]


def _comm(n: int, busbw: float = BUSBW, fixed: float = 0.0, hop: float = ALPHA / 2) -> float:
    """One message (the mlp's gradients fit one bucket) over a ring of n."""
    return 2 * (n - 1) / n * GRAD / busbw + fixed + 2 * (n - 1) * hop


def _by_hand(n: int, busbw: float = BUSBW, compute: float = COMPUTE) -> float:
    """The documented model with free cores, written out: step seconds at n workers."""
    hidden_share = (_comm(2) - (SYNC - COMPUTE)) / COMPUTE  # at the fitted link
    return compute + max(_comm(n, busbw) - hidden_share * compute, 0.0)


# --- the collective's terms -----------------------------------------------------------------


def test_ring_allreduce_cost_is_textbook() -> None:
    link = predict.LinkCost(predict.LatencySplit(0.0, 1e-3, True), {2: 1e8}, None)
    assert link.allreduce_s(1e8, 1, 2, busbw_bps=1e8) == pytest.approx(1.0 + 2e-3)
    assert link.allreduce_s(1e8, 1, 4, busbw_bps=1e8, hop_s=0.0) == pytest.approx(1.5)
    assert link.allreduce_s(0.0, 4, 4) == pytest.approx(4 * 6 * 1e-3)
    assert link.allreduce_s(1e8, 3, 1) == 0.0


def test_latency_comes_from_small_messages_and_bandwidth_from_large() -> None:
    # a 112 MB/s link with 100 us latency, sizes 4 KiB-64 MiB, 2% noise on every time:
    # a least-squares intercept through all sizes ranges over +-1 ms here
    sizes = [4096 * 4**k for k in range(8)]
    rng = np.random.default_rng(7)
    for _ in range(50):
        noisy = [{"bytes": s, "latency_s": (1e-4 + s / 112e6) * (1 + 0.02 * rng.standard_normal())} for s in sizes]  # fmt: skip
        cost = predict.record_cost(noisy, 2)
        assert 0.8e-4 < cost.latency_s < 1.2e-4 + 0.03 * 4096 / 112e6
        assert cost.busbw_bps == pytest.approx(112e6, rel=0.06)


def test_a_record_that_cannot_give_both_terms_is_refused() -> None:
    flat = [{"bytes": 4096, "latency_s": 2e-3}, {"bytes": 2**22, "latency_s": 1e-3}]
    with pytest.raises(predict.PredictError, match="took no longer than its smallest"):
        predict.record_cost(flat, 2)
    with pytest.raises(predict.PredictError, match="two message sizes or more"):
        predict.record_cost(flat[:1], 2)
    notes: list[str] = []
    bad = _collective()
    bad["results"] = flat  # type: ignore[typeddict-item]
    assert predict.samples([*_measured()[:2], bad], notes=notes) == []
    assert any("took no longer" in n for n in notes)


def test_fixed_and_per_hop_latency_are_told_apart_by_two_worker_counts() -> None:
    fixed, hop = 5e-5, 2.5e-5  # latency(2) = 100 us, latency(4) = 200 us
    split = predict.split_latency({2: fixed + 2 * hop, 4: fixed + 6 * hop})
    assert (
        split.identified
        and split.fixed_s == pytest.approx(fixed)
        and split.hop_s == pytest.approx(hop)
    )
    one = predict.split_latency({2: 1e-4})
    assert not one.identified and one.fixed_s == 0 and one.hop_s == pytest.approx(5e-5)
    falling = predict.split_latency({2: 2e-4, 4: 1e-4})  # noise: all of it fixed
    assert falling.identified and falling.hop_s == 0 and falling.fixed_s == pytest.approx(1.5e-4)
    # latency growing faster than the hops (cores shared at 4): the line through both
    # measurements is kept, so the 2-worker latency stays what was measured
    steep = predict.split_latency({2: 0.58e-3, 4: 7.73e-3})
    assert steep.fixed_s < 0 and steep.fixed_s + 2 * steep.hop_s == pytest.approx(0.58e-3)
    assert steep.fixed_s + 6 * steep.hop_s == pytest.approx(7.73e-3)
    # fitted from records at 2 and 4 workers, the prediction at 8 pays fixed + 14 hops
    recs = [*_measured(), _collective(world=4, latency=fixed + 6 * hop)]
    recs[2] = _collective(latency=fixed + 2 * hop)
    (sample,) = predict.samples(recs)
    fit = sample.fit()
    assert fit.link.latency.identified
    step = predict.Target().step_s(fit, 8)
    comm2 = _comm(2, fixed=fixed, hop=hop)
    hidden = comm2 - (SYNC - COMPUTE)
    assert step == pytest.approx(COMPUTE + _comm(8, fixed=fixed, hop=hop) - hidden)
    assert "latency split" not in " ".join(sample.held_fixed())
    (alone,) = predict.samples(_measured())
    assert any("latency split" in h for h in alone.held_fixed())


# --- the fit and its prediction -------------------------------------------------------------


def test_prediction_matches_the_model_worked_by_hand() -> None:
    (sample,) = predict.samples(_measured())
    fit = sample.fit()
    assert fit.grad_bytes == GRAD and fit.messages == 1 and not fit.censored
    preds = predict.run([sample], predict.Target(), [8, 64, 512], draws=20)
    for p in preds:
        step = _by_hand(p.workers)
        assert p.step_s == pytest.approx(step)
        assert p.throughput == pytest.approx(p.workers * 32 / step)
        assert p.compute_share == pytest.approx(COMPUTE / step)


def test_another_link_rate_scales_bus_bandwidth_and_user_inputs_replace_measured_ones() -> None:
    (sample,) = predict.samples(_measured())
    fit = sample.fit()
    p = predict.predict(fit, predict.Target(link_rate_bps=25 * RATE0), 64)
    assert p.step_s == pytest.approx(_by_hand(64, busbw=25 * BUSBW))
    given = predict.Target(link_rate_bps=25 * RATE0, busbw_fraction=0.5, compute_s=0.2)
    p = predict.predict(fit, given, 64)
    assert p.step_s == pytest.approx(_by_hand(64, busbw=0.5 * 25 * RATE0 / 8, compute=0.2))
    assert p.compute_share == pytest.approx(0.2 / p.step_s)


def test_the_interval_treats_runs_not_windows_as_units() -> None:
    # three runs of 100, 110 and 120 ms, each with windows spread +-10%: the windows
    # pooled give about [108, 112] ms; the runs' t-interval is what the step must span
    sync = [_train(2, s, windows=9, spread=0.1) for s in (0.100, 0.110, 0.120)]
    compute = [_train(2, 0.050, sync=False) for _ in range(3)]
    (sample,) = predict.samples([*sync, *compute, _collective(), _collective()])
    (p,) = predict.run([sample], predict.Target(), [2], draws=4000)
    lo, hi = stats.log_t_interval([0.100, 0.110, 0.120]) or (0.0, 0.0)
    assert 64 / p.throughput_interval[1] == pytest.approx(lo, rel=0.04)
    assert 64 / p.throughput_interval[0] == pytest.approx(hi, rel=0.04)
    again = predict.run([sample], predict.Target(), [2], draws=4000)[0]
    assert again.throughput_interval == p.throughput_interval  # seeded: reproducible


def test_an_input_with_one_unit_is_named_as_held_fixed() -> None:
    (sample,) = predict.samples(_measured())
    held = sample.held_fixed()
    assert "synced step (1 run)" in held and "collectives at 2 workers (1 record)" in held
    (p,) = predict.run([sample], predict.Target(link_rate_bps=4 * RATE0), [8], draws=50)
    rec = predict.to_record(p, ["bench", "predict"])
    assert rec["predicted"]["interval"]["held_fixed"] == held


def test_slowdown_beyond_the_ring_cost_is_kept_as_a_fixed_extra() -> None:
    slow = 0.5  # far more than compute + comm(2): a cost the model does not see
    (sample,) = predict.samples([_train(2, slow), _train(2, COMPUTE, sync=False), _collective()])
    fit = sample.fit()
    assert fit.hidden_share == 0 and predict.Target().step_s(fit, 2) == pytest.approx(slow)
    assert fit.extra_s == pytest.approx(slow - COMPUTE - fit.comm_s)


def test_communication_fully_hidden_gives_a_lower_bound_not_a_point() -> None:
    # the synced step as fast as the twin: the fit sees only that the engine hid at
    # least comm(2); at 64 workers over a slower link it may hide more
    (sample,) = predict.samples([_train(2, COMPUTE), _train(2, COMPUTE, sync=False), _collective()])
    fit = sample.fit()
    assert fit.censored and fit.overlap == pytest.approx(1.0)
    target = predict.Target(link_rate_bps=RATE0 // 20)
    p = predict.predict(fit, target, 64, [fit])
    assert (
        p.bound == "lower" and p.throughput_upper is not None and p.throughput_upper > p.throughput
    )
    upper_step = COMPUTE + max(_comm(64, BUSBW / 20) - COMPUTE, 0.0)
    assert p.throughput_upper == pytest.approx(64 * 32 / upper_step)
    rec = predict.to_record(p, ["bench", "predict"])
    assert predict.table([rec])["samples/s"].iloc[0].startswith(">= ")


def test_noise_never_makes_the_overlap_exceed_one() -> None:
    # the synced run measured faster than its twin
    (sample,) = predict.samples(
        [_train(2, 0.9 * COMPUTE), _train(2, COMPUTE, sync=False), _collective()]
    )
    fit = sample.fit()
    assert fit.exposed_s == 0 and 0 <= fit.overlap <= 1 and fit.hidden_share <= 1
    (p,) = predict.run([sample], predict.Target(), [8], draws=10)
    assert predict.to_record(p, [])["predicted"]["inputs"]["overlap_at_fit"] <= 1


# --- the CPU communication takes ---------------------------------------------------------


def _cpu_case() -> predict.Sample:
    # 2 workers of 1 thread on 2 CPUs (namespaces on one machine): the synced run's
    # worker uses 3 ms more CPU per step than its twin's, on cores that have none spare
    sync, compute = 0.014, COMPUTE
    recs = [_train(2, sync, worker_cores=(compute + 0.003) / sync),
            _train(2, compute, sync=False, worker_cores=1.0), _collective()]  # fmt: skip
    (sample,) = predict.samples(recs)
    return sample


def test_a_records_cores_are_the_whole_runs_shared_by_its_workers() -> None:
    cpu = predict.inputs.run_cpu_s
    # as measured on the check's machine: both ranks of a 2-worker run bench launched
    # over namespaces report 1.97 cores, the run's (one host name); a worker took half
    rec = _train(2, 0.0045, worker_cores=0.0)
    rec["contention"] = [{"own_cpu_cores": 1.97}, {"own_cpu_cores": 1.97}]
    assert cpu(rec, 0.0045) == pytest.approx(0.985 * 0.0045)
    # real hosts, placed unevenly: each rank shares its figure with its host's ranks
    uneven = _train(3, 0.0045, rate=None, worker_cores=0.0)
    uneven["hosts"] = ["a", "a", "b"]
    uneven["contention"] = [{"own_cpu_cores": c} for c in (2.0, 2.0, 0.9)]
    assert cpu(uneven, 0.0045) == pytest.approx((1.0 + 1.0 + 0.9) / 3 * 0.0045)
    # without the run's label (ranks started by hand) a rank counted its launcher's
    # tree: over namespaces, its own namespace's one worker
    by_hand = _train(2, 0.0045)
    by_hand["contention"] = [{"own_cpu_cores": 0.985}, {"own_cpu_cores": 0.985}]
    assert cpu(by_hand, 0.0045) == pytest.approx(0.985 * 0.0045)
    # a 1-worker run's cores are its one worker's
    single = _train(1, COMPUTE, rate=None)
    single["contention"] = [{"own_cpu_cores": 1.0}]
    assert cpu(single, COMPUTE) == pytest.approx(COMPUTE)
    damaged = _train(2, 0.0045)
    damaged["contention"] = [{"own_cpu_cores": True}, {"own_cpu_cores": 1.0}]
    assert cpu(damaged, 0.0045) is None


def test_an_emulated_link_costs_a_gradient_its_bytes_at_the_rate_like_a_wire() -> None:
    # the emulation serialises every frame at its rate (a bucket of two frames), so the
    # model gives the whole gradient the bus bandwidth, whatever bucket the record names
    recs = [_train(2, SYNC), _train(2, COMPUTE, sync=False), _collective()]
    (sample,) = predict.samples(recs)
    fit = sample.fit()
    assert fit.comm_s == pytest.approx(GRAD / BUSBW + ALPHA)
    assert predict.Target()._comm_s(fit, 2)[0] == pytest.approx(fit.comm_s)
    faster = predict.Target(link_rate_bps=2 * RATE0)
    assert faster._comm_s(fit, 2)[0] == pytest.approx(GRAD / (2 * BUSBW) + ALPHA)
    # --check predicts a faster emulated link's cell with the same rule
    checked = [_train(2, 0.011, rate=2 * RATE0)]
    df, _ = predict.check(recs + checked, RATE0, draws=10)
    (row,) = df.to_dict("records")
    step = faster.step_s(fit, 2)
    assert row["predicted samples/s"] == pytest.approx(2 * 32 / step)


def test_runs_over_the_earlier_link_emulation_are_left_out_saying_so() -> None:
    # its 67 KB bucket let mlp's gradient through at line speed: no link behaves so,
    # and a fit on it would predict any real link too fast
    earlier = [
        _train(2, SYNC, earlier_link=True),
        _train(2, COMPUTE, sync=False, earlier_link=True),
    ]
    notes: list[str] = []
    assert predict.samples([*earlier, _collective()], notes=notes) == []
    (note,) = [n for n in notes if "earlier link emulation" in n]
    assert note.startswith("2 runs") and "bench run --emulate-link" in note
    assert predict.inputs.measured(earlier) == []
    # the same runs over the current emulation fit, with no such note
    notes = []
    assert len(predict.samples(_measured(), notes=notes)) == 1
    assert not any("earlier" in n for n in notes)
    # a link that is not tc tbf (a real one, or htb) never counts as the earlier one
    assert not predict.inputs.earlier_emulation(cast(LoadedRecord, {"link": {"qdisc": "htb"}}))
    assert not predict.inputs.earlier_emulation(cast(LoadedRecord, {}))


def test_cpu_taken_by_communication_stays_on_a_faster_link_and_vanishes_on_free_cores() -> None:
    fit = _cpu_case().fit()
    assert fit.comm_cpu_s == pytest.approx(0.003) and fit.cpu_s == pytest.approx(0.003)
    assert fit.machine.shared and not fit.hosts.shared
    exposed = 0.014 - COMPUTE - 0.003
    hidden = _comm(2) - exposed
    assert fit.hidden_s == pytest.approx(hidden)
    here = predict.Target(link_rate_bps=100 * RATE0, same_machine=True)
    fast_comm = _comm(2, 100 * BUSBW)
    assert here.step_s(fit, 2) == pytest.approx(COMPUTE + max(fast_comm - hidden, 0) + 0.003)
    assert here.step_s(fit, 2) >= COMPUTE + 0.003  # a faster link cannot remove it
    cluster = predict.Target(link_rate_bps=100 * RATE0)  # a host per worker, 2 CPUs each
    assert cluster.step_s(fit, 2) == pytest.approx(COMPUTE + max(fast_comm - hidden, 0))


def test_more_workers_on_the_same_cores_stretch_compute_and_the_cpu_term() -> None:
    fit = _cpu_case().fit()
    here = predict.Target(same_machine=True)
    # 4 one-thread workers on 2 CPUs: compute twice as long, and each core carries two
    # workers' communication CPU, which grows with the ring's 2(n-1)/n
    cpu4 = 0.003 * (1.5 / 1.0) * 4 / 2
    hidden = fit.hidden_share * 2 * COMPUTE
    assert here.compute_at(fit, 4) == pytest.approx(2 * COMPUTE)
    assert here.step_s(fit, 4) == pytest.approx(2 * COMPUTE + max(_comm(4) - hidden, 0) + cpu4)


def test_oversubscribed_cores_put_the_point_between_no_overlap_and_full_overlap() -> None:
    """4 one-thread workers on 2 CPUs: the lower end adds each worker's waits to its
    stretched compute (the slowest sharing), the upper end lets another worker compute
    meanwhile; the point is their geometric mean."""
    fit = _cpu_case().fit()
    here = predict.Target(same_machine=True)
    assert here.shared_step_s(fit, 2) is None  # as oversubscribed as the fit: a point
    assert predict.Target().shared_step_s(fit, 4) is None  # a host per worker: free cores
    cpu = 0.003 * 1.5  # one worker's communication CPU, grown with 2(n-1)/n
    busy = 4 * (COMPUTE + cpu) / 2  # every worker's CPU over the 2 cores
    path = COMPUTE + max(_comm(4) - fit.hidden_share * COMPUTE, 0.0)  # one worker alone
    assert here.shared_step_s(fit, 4) == pytest.approx(max(busy, path))
    p = predict.predict(fit, here, 4, [fit])
    assert p.bound == "between" and p.throughput_upper == pytest.approx(4 * 32 / max(busy, path))
    rec = predict.to_record(p, [])
    (reason,) = rec["predicted"]["bound_reasons"]
    assert "more threads than cores" in reason and "geometric" in reason
    assert predict.table([rec]).iloc[0]["samples/s"].startswith("~ ")
    # on a link 5x slower the two ends are far apart: the point is their geometric mean
    mid = predict.Target(same_machine=True, link_rate_bps=RATE0 // 5)
    slowest, fastest = mid.step_s(fit, 4), mid.shared_step_s(fit, 4)
    assert fastest is not None and slowest > 1.3 * fastest
    p = predict.predict(fit, mid, 4, [fit])
    assert p.step_s == pytest.approx((slowest * fastest) ** 0.5, rel=1e-9)
    assert p.throughput_lower == pytest.approx(4 * 32 / slowest)
    assert p.throughput_upper == pytest.approx(4 * 32 / fastest)
    assert p.compute_share == pytest.approx(2 * COMPUTE / p.step_s)
    assert predict.to_record(p, [])["predicted"]["throughput_lower"] == p.throughput_lower
    # an engine whose waits poll keeps its cores while waiting: the no-overlap end
    assert fit.engine == "ddp" and not registry.get("ddp").waits_spin
    polls = predict.predict(dataclasses.replace(fit, engine="horovod"), mid, 4, [fit])
    assert polls.bound == "between" and polls.step_s == pytest.approx(slowest)
    assert "poll" in polls.bound_reasons[0]
    at_two = predict.predict(fit, here, 2, [fit])
    assert at_two.bound is None and at_two.throughput_upper is None
    # on a link 50x slower one worker's own wait is longer than all the CPU: path decides
    slow = predict.Target(same_machine=True, link_rate_bps=RATE0 // 50)
    path = COMPUTE + max(_comm(4, BUSBW / 50) - fit.hidden_share * COMPUTE, 0.0)
    assert path > busy and slow.shared_step_s(fit, 4) == pytest.approx(path)


def test_a_censored_fit_on_oversubscribed_cores_takes_the_fastest_of_both_upper_ends() -> None:
    # all communication hidden at the fit (its synced step no longer than the twin's), on
    # 2 one-thread workers on 2 CPUs: at 4 workers the upper end hides all of compute1
    (sample,) = predict.samples([_train(2, COMPUTE), _train(2, COMPUTE, sync=False), _collective()])
    fit = sample.fit()
    assert fit.censored and fit.comm_cpu_s == 0 and fit.extra_s == 0
    here = predict.Target(same_machine=True)
    path = COMPUTE + max(_comm(4) - COMPUTE, 0.0)  # hides up to all of compute1
    busy = 4 * COMPUTE / 2
    fastest = min(here.step_s(fit, 4, hide_all=True), max(busy, path))
    p = predict.predict(fit, here, 4, [fit])
    assert p.throughput_upper == pytest.approx(4 * 32 / fastest)
    reasons = predict.bound_reasons(fit, here, 4)
    assert len(reasons) == 2 and "all communication hidden" in reasons[0]
    # the point lies between the sharings at the overlap the fit saw; hiding more
    # raises only the top (a link 5x slower sets the three apart)
    mid = predict.Target(same_machine=True, link_rate_bps=RATE0 // 5)
    slowest, seen = mid.step_s(fit, 4), mid.shared_step_s(fit, 4)
    top = min(mid.step_s(fit, 4, hide_all=True), mid.shared_step_s(fit, 4, hide_all=True) or 1.0)
    assert seen is not None and slowest > 1.1 * seen and seen > 1.1 * top
    p = predict.predict(fit, mid, 4, [fit])
    assert p.bound == "between" and p.throughput_lower == pytest.approx(4 * 32 / slowest)
    assert p.step_s == pytest.approx((slowest * seen) ** 0.5, rel=1e-9)
    assert p.throughput_upper == pytest.approx(4 * 32 / top)


def test_the_interval_holds_both_ends_of_a_point_between_them() -> None:
    # collectives at one worker count: the latency split is drawn over its whole range
    # while the point takes all of it per hop, the slowest case beyond the fit's count
    (sample,) = predict.samples([_train(2, 0.014, worker_cores=0.93), _train(2, 0.0141, worker_cores=0.93),
                                 _train(2, COMPUTE, sync=False, worker_cores=1.0),
                                 _train(2, 0.0101, sync=False, worker_cores=1.0),
                                 _collective(latency=5e-3)])  # fmt: skip
    assert any("latency split" in h for h in sample.held_fixed())
    mid = predict.Target(same_machine=True, link_rate_bps=RATE0 // 5)
    (p,) = predict.run([sample], mid, [8], draws=300)
    lo, hi = p.throughput_interval
    assert p.bound == "between" and p.throughput_lower is not None and p.throughput_upper
    assert lo <= p.throughput_lower < p.throughput < p.throughput_upper <= hi


# --- bytes and batch ------------------------------------------------------------------------


def test_gradient_bytes_count_the_real_classes_and_compression() -> None:
    assert predict.grad_bytes_of("mlp", (1, 28, 28)) == GRAD
    assert predict.grad_bytes_of("mlp", (1, 28, 28), compression="fp16") == GRAD / 2
    # BatchNorm's scale and shift count; ResNet-50 has 25.56 M trainable parameters
    assert predict.grad_bytes_of("resnet50", (3, 224, 224), 1000) / 4 == pytest.approx(
        25.557e6, rel=1e-3
    )
    (sample,) = predict.samples([_train(2, SYNC, grad_compression="fp16"),
                                 _train(2, COMPUTE, sync=False, grad_compression="fp16"), _collective()])  # fmt: skip
    assert sample.grad_bytes == GRAD / 2
    # the transformer's output layer is its vocabulary: an old record without num_classes
    # gets it from the corpus, not the default of 10
    vocab = data.load_sonnets(seed=0, test_fraction=0.1).num_classes
    shape = (64,)
    rec = _train(2, SYNC, model="transformer", dataset="sonnets")
    rec["dataset"] = {"name": "sonnets", "input_shape": list(shape)}
    m = models.get("transformer")
    params = sum(int(np.prod(s)) for s, _ in m.param_shapes(shape, vocab).values())
    notes: list[str] = []
    (tsample,) = predict.samples([rec, _train(2, COMPUTE, sync=False, model="transformer",
                                              dataset="sonnets"), _collective()], notes=notes)  # fmt: skip
    assert vocab != 10 and tsample.grad_bytes >= 4 * params
    assert tsample.grad_bytes > predict.grad_bytes_of("transformer", shape, 10)


def test_strong_scaling_is_refused_away_from_the_fitted_worker_count() -> None:
    recs = [
        _train(2, SYNC, scaling="strong"),
        _train(2, COMPUTE, sync=False, scaling="strong"),
        _collective(),
    ]
    (sample,) = predict.samples(recs)
    fit = sample.fit()
    assert predict.predict(fit, predict.Target(link_rate_bps=2 * RATE0), 2).per_worker_batch == 32
    with pytest.raises(predict.PredictError, match="strong scaling"):
        predict.predict(fit, predict.Target(), 8)
    notes: list[str] = []
    assert len(predict.run([sample], predict.Target(), [2, 8], draws=5, notes=notes)) == 1
    assert "strong scaling" in notes[0]


# --- records, tables and the check ------------------------------------------------------


def test_groups_without_their_inputs_are_skipped_with_the_reason() -> None:
    notes: list[str] = []
    assert predict.samples([_train(2, SYNC), _collective()], notes=notes) == []
    assert "no compute-only step time" in notes[0]
    notes.clear()
    assert predict.samples(_measured()[:2], notes=notes) == []
    assert "bench collectives --emulate-link 1000000000bit --engines ddp --workers 2" in notes[0]
    # a 1-worker run stands in for a missing twin
    single = _train(1, COMPUTE, rate=None)
    (sample,) = predict.samples([_train(2, SYNC), single, _collective()])
    assert sample.fit().compute_s == pytest.approx(COMPUTE)
    with pytest.raises(predict.PredictError, match="--emulate-link RATE"):
        unknown = predict.samples([_train(2, SYNC, rate=None), single, _collective(rate=None)])
        predict.Target(link_rate_bps=RATE0).busbw(unknown[0].fit(), 2)


def test_predictions_are_records_kept_out_of_measured_tables() -> None:
    (sample,) = predict.samples(_measured())
    preds = predict.run([sample], predict.Target(link_rate_bps=25 * RATE0), [8, 512], draws=10)
    recs = [predict.to_record(p, ["bench", "predict"]) for p in preds]
    for rec in recs:
        assert schema.validate(rec) is None, schema.validate(rec)
        assert rec["kind"] == "prediction" and "throughput" not in rec
    loaded = cast(list[LoadedRecord], recs)  # as bench compare reads them back
    assert frame.frame(loaded).empty  # no measured table reads them
    text = formats.render(records.Loaded(loaded, [], []), "text", 0.95)
    assert text and "MODEL PREDICTIONS, not measurements" in text and "25gbit" in text
    assert "compute share" in text and "efficiency" not in text.split("MODEL PREDICTIONS")[1]
    page = html.build(loaded).html
    assert "Model predictions (not measurements)" in page and "compute share" in page
    # a record written before the rename still reads: its "efficiency" was compute / step
    old = cast(dict[str, Any], recs[0])
    old["predicted"] = {
        k: v for k, v in old["predicted"].items() if not k.startswith("compute_share")
    }
    old["predicted"]["efficiency"] = 0.5
    assert predict.table([cast(LoadedRecord, old)])["compute share"].iloc[0] == "50%"


def test_check_compares_predictions_with_runs_on_other_links_and_worker_counts() -> None:
    # runs at a second rate made by the model itself: the error must be ~0
    rate1 = 4 * RATE0
    sync1 = _by_hand(2, busbw=4 * BUSBW)
    recs = [*_measured(), _train(2, sync1, rate=rate1), _train(2, COMPUTE, sync=False, rate=rate1),
            _collective(rate=rate1, busbw=4 * BUSBW)]  # fmt: skip
    df, _ = predict.check(recs, RATE0, draws=50)
    assert list(df["link"]) == ["4gbit"] and abs(df["error"].iloc[0]) < 1e-9
    assert "median absolute error" in predict.render_check(df)
    # a checked cell is never fitted: it needs no twin and no collectives of its own
    bare, _ = predict.check([*_measured(), _train(2, sync1, rate=rate1)], RATE0, draws=50)
    assert list(bare["link"]) == ["4gbit"] and abs(bare["error"].iloc[0]) < 1e-9
    # steps 25% slower than the model says: it overestimates throughput by 25%
    recs[3] = _train(2, sync1 * 1.25, rate=rate1)
    df, _ = predict.check(recs, RATE0, draws=50)
    assert df["error"].iloc[0] == pytest.approx(0.25)
    # 4 workers on the fitted link, on the same 2 CPUs: compute doubles
    # collectives at 2 and 4 workers took the same latency: all of it is fixed, none per hop
    sync4 = 2 * COMPUTE + max(
        _comm(4, fixed=ALPHA, hop=0.0) - (_comm(2) - (SYNC - COMPUTE)) * 2, 0.0
    )
    four = [_train(4, sync4), _train(4, 2 * COMPUTE, sync=False), _collective(world=4)]
    df, _ = predict.check([*_measured(), *four], RATE0, draws=50)
    row = df[df["workers"] == 4].iloc[0]
    # that is the no-overlap end on cores oversubscribed beyond the fit's; the point is
    # the geometric mean with the full-overlap end
    (fit,) = [s.fit() for s in predict.samples([*_measured(), *four]) if s.workers == 2]
    shared = predict.Target(same_machine=True).shared_step_s(fit, 4)
    assert shared is not None and shared < sync4
    assert row["link"] == "1gbit"
    assert row["error"] == pytest.approx((sync4 / shared) ** 0.5 - 1, rel=0.01)
    assert row["bound"] == "between" and "~ " in predict.render_check(df)


def test_the_check_reports_how_often_the_interval_holds_the_measured_value() -> None:
    rate1 = 4 * RATE0
    sync1 = _by_hand(2, busbw=4 * BUSBW)
    base = [_train(2, s, spread=0.05) for s in (0.95 * SYNC, SYNC, 1.05 * SYNC)]
    twins = [_train(2, COMPUTE, sync=False) for _ in range(3)]
    at1 = [_train(2, sync1, rate=rate1), _train(2, COMPUTE, sync=False, rate=rate1),
           _collective(rate=rate1, busbw=4 * BUSBW)]  # fmt: skip
    df, _ = predict.check([*base, *twins, _collective(), _collective(), *at1], RATE0, draws=500)
    assert bool(df["covered"].iloc[0]) and "ddp: " in predict.render_check(df)
    assert "1/1" in predict.render_check(df)
    far = [_train(2, 3 * sync1, rate=rate1), *at1[1:]]
    df, _ = predict.check([*base, *twins, _collective(), _collective(), *far], RATE0, draws=500)
    assert not bool(df["covered"].iloc[0]) and "0/1" in predict.render_check(df)


def test_the_error_interval_adds_the_measured_runs_spread_in_quadrature() -> None:
    # prediction 100 [80, 125]: log half-widths ln(1.25) = 0.22314 both ways
    iv = predict.error_interval(100.0, (80.0, 125.0), 100.0, [1.0, 1.0, 1.0])
    assert iv == pytest.approx((-0.2, 0.25))  # runs that agree add nothing
    # runs at e^-0.1, 1, e^0.1: sd of logs 0.1, t(0.975, 2) = 4.3027, / sqrt(3) = 0.24842;
    # hypot(0.22314, 0.24842) = 0.33392 -> expm1(-+0.33392)
    runs = [math.exp(-0.1), 1.0, math.exp(0.1)]
    assert predict.error_interval(100.0, (80.0, 125.0), 100.0, runs) == pytest.approx(
        (-0.28388, 0.39640), abs=1e-4
    )
    # off-centre: predicted 100 against 80 measured is +25%, and the interval moves with it
    low, high = predict.error_interval(100.0, (80.0, 125.0), 80.0, [1.0])
    assert (low, high) == pytest.approx((0.0, 0.5625))
    # one run: no spread of its own, the fit's alone


def test_a_check_cell_whose_runs_scatter_is_consistent_where_the_fit_alone_misses() -> None:
    rate1 = 4 * RATE0
    sync1 = _by_hand(2, busbw=4 * BUSBW)
    base = [_train(2, s, spread=0.01) for s in (0.99 * SYNC, SYNC, 1.01 * SYNC)]
    twins = [_train(2, COMPUTE, sync=False) for _ in range(3)]
    fit = [*base, *twins, _collective(), _collective()]
    # three runs at the new rate that scatter by +-40% around 1.3x the model's step
    checked = [_train(2, f * sync1, rate=rate1) for f in (0.8, 1.3, 1.9)]
    df, _ = predict.check(
        [*fit, *checked, _collective(rate=rate1, busbw=4 * BUSBW)], RATE0, draws=500
    )
    row = df.iloc[0]
    assert not bool(row["covered"]) and bool(row["consistent"])
    assert row["error interval"][0] < 0 < row["error interval"][1]
    assert "consistent 1/1" in predict.render_check(df)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--link", "25gb"], "rate '25gb' is not understood"),
        (["--workers", "8,x"], "--workers takes integers"),
        (["--check"], "--check needs --fit-link"),
        (["--busbw-fraction", "1.5", "--link", "1gbit"], "--busbw-fraction must be > 0 and <= 1"),
        (["--compute-ms", "0"], "--compute-ms must be > 0"),
        (["--cpus-per-node", "0"], "--cpus-per-node must be > 0"),
    ],
)
def test_bad_predict_arguments_are_refused_by_name(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    assert cli.main(["predict", str(tmp_path), "--no-write", *argv]) == EXIT_BAD_INPUT
    assert message in capsys.readouterr().err


def test_predict_refuses_a_folder_without_inputs(
    capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    assert cli.main(["predict", str(tmp_path), "--no-write"]) == EXIT_BAD_INPUT
    assert "nothing to fit" in capsys.readouterr().err


def test_what_if_states_every_input_and_matches_the_formula(
    capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    argv = ["predict", "--what-if", "resnet50", "--compute-ms", "292", "--grad-mb", "97.5",
            "--hidden-share", "0", "--link", "25gbit", "--busbw-fraction", "0.9",
            "--hop-latency-us", "10", "--batch", "64", "--workers", "512",
            "--results", str(tmp_path)]  # fmt: skip
    assert cli.main(argv) == 0
    (rec,) = records.load([tmp_path / predict.FILE]).records
    grad, busbw, n = 97.5 * 2**20, 0.9 * 25e9 / 8, 512
    comm = 2 * (n - 1) / n * grad / busbw + 4 * 2 * (n - 1) * 10e-6  # 4 buckets of 25 MiB
    assert rec["predicted"]["compute_share"] == pytest.approx(0.292 / (0.292 + comm))
    assert rec["predicted"]["global_batch"] == 64 * 512
    assert "stated inputs (what-if)" in capsys.readouterr().out
    assert cli.main(["predict", "--what-if", "resnet50", "--no-write"]) == EXIT_BAD_INPUT
    assert "--what-if states every input; give --compute-ms" in capsys.readouterr().err


def test_a_supplied_compute_time_scales_the_measured_extra() -> None:
    (sample,) = predict.samples([_train(2, 0.5), _train(2, COMPUTE, sync=False), _collective()])
    fit = sample.fit()
    fast = predict.Target(compute_s=COMPUTE / 10)
    assert fast.step_s(fit, 2) == pytest.approx(COMPUTE / 10 + fit.comm_s + fit.extra_s / 10)
    assert math.isfinite(fast.step_s(fit, 64))


def test_two_runs_give_a_wide_but_finite_interval() -> None:
    # two units: t with one degree of freedom, whose rare huge draws must not overflow
    recs = [_train(2, 0.012), _train(2, 0.014), _train(2, COMPUTE, sync=False),
            _train(2, 0.8 * COMPUTE, sync=False), _collective(), _collective(latency=2 * ALPHA)]  # fmt: skip
    (sample,) = predict.samples(recs)
    (p,) = predict.run([sample], predict.Target(link_rate_bps=RATE0 // 4), [16], draws=3000)
    lo, hi = p.throughput_interval
    assert math.isfinite(lo) and math.isfinite(hi) and lo <= p.throughput <= hi
    assert hi / lo > 1.5  # two runs say little, and the interval shows it


def test_one_worker_collectives_are_not_a_worker_count() -> None:
    recs = [*_measured(), _collective(world=1)]
    (sample,) = predict.samples(recs)
    assert set(sample.by_workers()) == {2}
    assert any("latency split" in h for h in sample.held_fixed())


def test_a_strong_scaling_fit_takes_no_one_worker_run_as_its_compute() -> None:
    # the 1-worker run trained the whole global batch: n times a worker's compute
    single = _train(1, 2 * COMPUTE, rate=None, scaling="strong")
    notes: list[str] = []
    recs = [_train(2, SYNC, scaling="strong"), single, _collective()]
    assert predict.samples(recs, notes=notes) == []
    assert "no compute-only step time" in notes[0]


def test_a_lower_bound_reaches_its_upper_end_and_marks_both_figures() -> None:
    recs = [_train(2, COMPUTE), _train(2, COMPUTE), _train(2, COMPUTE, sync=False),
            _train(2, COMPUTE, sync=False), _collective(), _collective()]  # fmt: skip
    (sample,) = predict.samples(recs)
    (p,) = predict.run([sample], predict.Target(link_rate_bps=RATE0 // 20), [64], draws=200)
    assert p.bound == "lower" and p.throughput_upper is not None
    assert p.throughput_interval[1] >= p.throughput_upper
    row = predict.table([predict.to_record(p, [])]).iloc[0]
    assert row["samples/s"].startswith(">= ") and row["compute share"].startswith(">= ")


def test_the_cpu_term_grows_with_the_gradient_bytes() -> None:
    fit = _cpu_case().fit()
    here = predict.Target(same_machine=True, link_rate_bps=1000 * RATE0)
    doubled = predict.Target(same_machine=True, link_rate_bps=1000 * RATE0, grad_bytes=2 * GRAD)
    # on a link this fast the communication stays hidden either way: twice the bytes
    # add the CPU term once more, and nothing else
    assert _comm(2, 1000 * BUSBW) < fit.hidden_s
    assert doubled.step_s(fit, 2) - here.step_s(fit, 2) == pytest.approx(fit.cpu_s)


def test_the_check_refuses_inputs_it_would_ignore(
    capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    argv = ["predict", str(tmp_path), "--check", "--fit-link", "1gbit", "--link", "10gbit"]
    assert cli.main(argv) == EXIT_BAD_INPUT
    assert (
        "--check predicts where runs were measured, so it takes no --link"
        in capsys.readouterr().err
    )
    with pytest.raises(
        predict.PredictError, match="--fit-workers 4: the fitted link has runs at 2"
    ):
        predict.check(_measured(), RATE0, fit_workers=4)
