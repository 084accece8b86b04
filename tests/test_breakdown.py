"""Where the step goes and the verdict: hand-worked cases, then constructed real runs.

The constructed cases each make one cause true on purpose (a slowed rank, a 100 Mbit
link, a tiny model, a slowed input stage, a busy neighbour) and check that the verdict
names that cause and no other.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from bench import records
from bench.engines import Engine
from bench.launch import netns
from bench.measure import timeline
from bench.measure.contention import OTHER_CORES_LIMIT
from bench.records.types import LoadedRecord
from bench.render import formats
from bench.tables import breakdown, compare, derived
from bench.tables.frame import frame
from runners.adapters.base import union_seconds
from tests import shared_sweep as shared
from tests.conftest import NO_EXTRA_WINDOWS, ok_record, run_bench, run_engine
from tests.shared_sweep import SharedSweep


def test_union_of_collective_intervals_counts_overlaps_once() -> None:
    assert union_seconds([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0), (5.5, 5.7)]) == 4.0
    assert union_seconds([]) == 0.0


def _row(
    engine: str = "ddp", workers: int = 2, *, sync: bool = True, **over: Any
) -> dict[str, Any]:
    """A frame row as compare builds it; the step is 1e3 * global batch / throughput ms.

    `loads` (each rank's contention measure), `nodes`, `emulated` and `labelled` make
    the record the row's CPU figures are derived from, as the frame derives them."""
    row: dict[str, Any] = {
        "engine": engine,
        "single_node_engine": engine,
        "workers": workers,
        "model": "mlp",
        "status": records.Status.OK,
        "grad_sync": sync,
        "global_batch": 32 * workers,
        "per_worker_batch": 32,
        "throughput": 6400.0,
        "input_ms": 0.05,
        "contended": False,
        "oversubscribed": False,
        "peak_gflops": np.nan,
        "train_flops": np.nan,
        "breakdown": _profiled(
            [1.0] * workers,
            [2.0] * workers,
            [0.5] * workers,
            [8.0] * workers if sync else [0.0] * workers,
        ),
    }
    made = {k: over.pop(k) for k in ("loads", "nodes", "emulated", "labelled") if k in over}
    row.update(over)
    rec: dict[str, Any] = {
        "engine": engine,
        "world_size": workers,
        "nodes": made.get("nodes", 1),
        "contention": made.get("loads", []),
        "cpu_budget": {
            "workers_on_host": workers // made.get("nodes", 1),
            "threads_per_worker": 1,
            "usable_cpus": 2,
        },
        "link": {"emulated": True} if made.get("emulated") else None,
        "labels": {"attempt": "a"} if made.get("labelled") else {},
        "global_batch": row["global_batch"],
        "throughput": row["throughput"],
    }
    row["cpu"] = derived.rank_cpu(rec)
    row["layout"] = derived.layouts(rec)[0]
    row["step_s"] = derived.step_s(rec)
    return row


def _profiled(fwd: list[float], bwd: list[float], opt: list[float], comm: list[Any],
              source: str = "DDP communication hook", iqr: list[list[float]] | None = None,
              held: list[float] | None = None) -> dict[str, Any]:  # fmt: skip
    """A run's breakdown; its waits probe saw each rank's own work as forward + backward
    (every rank waiting for the slowest), each held back from outside `held` of the time."""
    own = [f + b for f, b in zip(fwd, bwd, strict=True)]
    return {
        "steps": 10,
        "phases_ms": {"forward": fwd, "backward": bwd, "optimizer": opt,
                      "step": [a + b + c for a, b, c in zip(fwd, bwd, opt, strict=True)]},
        "forward_iqr_ms": iqr or [[f * 0.95, f * 1.05] for f in fwd],
        "comm_ms": comm, "comm_source": source,
        **({"waits": _waits(own, held or [0.0] * len(own))} if len(own) > 1 else {}),
    }  # fmt: skip


def _waits(own: list[float], held: list[float]) -> dict[str, Any]:
    # an iteration lasts the slowest's own work: the others wait the rest of it
    return {
        "iterations": 50, "seconds": 0.5,
        "own_ms": {"mean": own, "p50": own, "p90": [x * 1.2 for x in own], "max": [x * 2 for x in own]},
        "wait_share": [(max(own) - x) / max(own) for x in own],
        "held_share": held, "throttled_ms": [None] * len(own), "run_delay_measured": True,
    }  # fmt: skip


def _cell(*rows: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame(list(rows))


def test_the_step_splits_into_the_twin_s_work_and_the_exposed_gap_worked_by_hand() -> None:
    # synced step 64 / 6400 = 10 ms; the twin's 64 / 16000 = 4 ms; hook saw 8 ms of comm
    twin = _cell(_row(sync=False, throughput=16000.0))
    p = breakdown.parts(_cell(_row()), twin)
    assert p is not None
    assert (p.step, p.compute, p.optimizer) == pytest.approx((10.0, 3.0, 0.5))
    assert (p.exposed, p.hidden, p.other) == pytest.approx((6.0, 2.0, 0.5))
    assert sum(p.shares().values()) == pytest.approx(1.0)
    # profiled phases longer than the twin's timed step (2.8 ms) are scaled down to it
    fast = breakdown.parts(_cell(_row()), _cell(_row(sync=False, throughput=64 / 2.8e-3)))
    assert fast is not None and (fast.compute, fast.optimizer) == pytest.approx((2.4, 0.4))
    assert (fast.exposed, fast.other) == pytest.approx((7.2, 0.0))
    # Paddle's allreduce runs inside backward: all of it exposed, none hidden
    paddle = _row("paddle", breakdown=_profiled([1.0] * 2, [9.0] * 2, [0.5] * 2, [None] * 2,
                                                 "not hookable: synchronous inside backward"))  # fmt: skip
    q = breakdown.parts(_cell(paddle), _cell(_row("paddle", sync=False, throughput=16000.0)))
    assert q is not None and (q.exposed, q.hidden) == pytest.approx((6.0, 0.0))
    # one worker: its own phases, no communication
    one = breakdown.parts(_cell(_row(workers=1, global_batch=32, throughput=8000.0)), twin[:0])
    assert one is not None and (one.compute, one.exposed, one.other) == pytest.approx(
        (3.0, 0.0, 0.5)
    )
    # without a twin the exposed part is unknown, and said so
    alone = breakdown.parts(_cell(_row()), twin[:0])
    assert alone is not None and np.isnan(alone.exposed) and "no compute-only twin" in alone.source


def _verdict(cell: pd.DataFrame, twin: pd.DataFrame) -> breakdown.Verdict:
    v = breakdown.verdict(cell, twin)
    assert v is not None
    return v


TWIN = _cell(_row(sync=False, throughput=16000.0))


def test_each_verdict_fires_on_its_own_evidence_and_only_there() -> None:
    # exposed comm (6 of 10 ms) is the largest share, CPUs free
    v = _verdict(_cell(_row()), TWIN)
    assert v.name == "communication-bound" and "exposed comm 60%" in v.evidence
    assert "bucket" in v.knob
    # the same cell, two runs, rank 1's own work 5 ms longer while it was held back from
    # outside half the time: rank 0 waits 5 ms of every 8, 62% of the 10 ms step, for it
    slow = _profiled([1.0, 6.0], [2.0, 2.0], [0.5, 0.5], [8.0, 8.0], held=[0.0, 0.5])
    v = _verdict(_cell(_row(breakdown=slow), _row(breakdown=slow)), TWIN)
    assert v.name == "straggler"
    assert "wait for rank 1 62% of the time, 6.25 ms of a 10.00 ms step (62% of" in v.evidence
    assert "in 2/2 runs" in v.evidence and "from outside its process 50% of the time" in v.evidence
    # a kernel that gave no scheduling delays: held back reads "-", not 0%
    unknown = _profiled([1.0, 6.0], [2.0, 2.0], [0.5, 0.5], [8.0, 8.0], held=[0.0, 0.5])
    del unknown["waits"]["held_share"]
    v = _verdict(_cell(_row(breakdown=unknown), _row(breakdown=unknown)), TWIN)
    assert "held back from outside its process - (not measured" in v.evidence, v.evidence
    # one run cannot say the same rank is behind in most runs
    assert _verdict(_cell(_row(breakdown=slow)), TWIN).name == "communication-bound"
    # as slow and not held back: slower at its own work (a loader, a pause), a straggler
    own = _profiled([1.0, 6.0], [2.0, 2.0], [0.5, 0.5], [8.0, 8.0], held=[0.0, 0.0])
    assert _verdict(_cell(_row(breakdown=own), _row(breakdown=own)), TWIN).name == "straggler"
    # waited for with its own work no slower and nothing holding it back alone: every
    # rank slowed alike now one, now the other, no straggler
    alike = _profiled([3.0, 3.0], [2.0, 2.0], [0.5, 0.5], [8.0, 8.0], held=[0.2, 0.2])
    alike["waits"]["wait_share"] = [0.6, 0.0]
    v = _verdict(_cell(_row(breakdown=alike), _row(breakdown=alike)), TWIN)
    assert v.name == "communication-bound" and "no straggler: the other ranks wait" in v.evidence
    # a difference that explains little of the step is no straggler either
    noisy = _profiled([1.0, 1.6], [2.0, 2.0], [0.5, 0.5], [8.0, 8.0], held=[0.0, 0.5])
    assert _verdict(_cell(_row(breakdown=noisy), _row(breakdown=noisy)), TWIN).name == (
        "communication-bound"
    )
    # other processes took a core
    busy = [{"other_cpu_cores": 1.1, "own_cpu_cores": 1.0, "cpu_count": 2, "steal_fraction": 0.0}]
    v = _verdict(_cell(_row(loads=busy, contended=True)), TWIN)
    assert v.name == "CPU-contended" and "1.10 cores" in v.evidence
    # a little steal flags the record (contended) but is not what bounds the step
    stolen = [{**busy[0], "other_cpu_cores": 0.0, "steal_fraction": 0.04}]
    assert _verdict(_cell(_row(loads=stolen, contended=True)), TWIN).name == "communication-bound"
    hog = [{**stolen[0], "steal_fraction": 0.3}]
    assert "stole 30.0%" in _verdict(_cell(_row(loads=hog, contended=True)), TWIN).evidence
    # over an emulated link each rank counts its peer in the other namespace as another
    # process; the machine's own use is both trees: no one else there
    peer = [{"other_cpu_cores": 1.0, "own_cpu_cores": 1.0, "cpu_count": 2}] * 2
    emu: dict[str, Any] = {"loads": peer, "nodes": 2, "emulated": True}
    assert _verdict(_cell(_row(**emu)), TWIN).name == "communication-bound"
    assert derived.cell_cpu(_cell(_row(**emu))).own == pytest.approx(2.0)
    v = _verdict(_cell(_row(loads=peer)), TWIN)  # one machine per host: that was someone else
    assert v.name == "CPU-contended" and "other processes used 1.00 cores" in v.evidence
    # launched by bench run, each rank counted the whole run on the machine (its label):
    # what it calls others is others, even over an emulated link
    emu = {"nodes": 2, "emulated": True, "labelled": True}
    shared = [{"other_cpu_cores": 0.5, "own_cpu_cores": 1.5, "cpu_count": 2}] * 2
    v = _verdict(_cell(_row(loads=shared, **emu)), TWIN)
    assert v.name == "CPU-contended" and "other processes used 0.50 cores" in v.evidence
    # building a batch takes longer than the step
    v = _verdict(_cell(_row(input_ms=12.0)), TWIN)
    assert v.name == "input-bound" and "12.00 ms" in v.evidence


def _one_worker(engine: str, step: float, fwd: float, bwd: float, opt: float) -> dict[str, Any]:
    return _row(
        engine,
        1,
        throughput=32 / (step / 1e3),
        breakdown=_profiled([fwd], [bwd], [opt], [0.0], "one worker"),
    )


def _synced(
    engine: str, step: float, twin_step: float, twin_phases: tuple[float, float, float], **over: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A 2-worker cell of `step` ms and its compute-only twin of `twin_step` ms."""
    fwd, bwd, opt = twin_phases
    twin = _row(
        engine,
        sync=False,
        throughput=64 / (twin_step / 1e3),
        breakdown=_profiled([fwd] * 2, [bwd] * 2, [opt] * 2, [0.0] * 2),
        **over,
    )
    return _row(engine, throughput=64 / (step / 1e3), **over), twin


def test_a_straggler_explains_a_share_of_the_time_lost_in_most_runs() -> None:
    """Against the 1-worker cell (1.82 ms lost): rank 1 making rank 0 wait 0.60 ms of
    each 2.80, 21% of the time and 0.96 ms of the 4.46 ms step, explains 53% of it: a
    straggler when the same rank in 2 of 2 runs, none when the runs name a different
    rank each or it explains less than a quarter; on shared CPUs, both said."""
    one = _one_worker("ddp", 2.64, 0.80, 1.55, 0.29)

    def cell(*owns: tuple[float, float], loads: Any = None) -> pd.DataFrame:
        rows = []
        for a, b in owns:
            two = _synced("ddp", 4.46, 2.57, (0.70, 1.48, 0.29))[0]
            two["breakdown"] = _profiled([a, b], [1.5, 1.5], [0.3, 0.3], [2.0, 2.0],
                                         held=[0.0, 0.5] if b > a else [0.5, 0.0])  # fmt: skip
            if loads:
                two = _row("ddp", throughput=two["throughput"], breakdown=two["breakdown"],
                           loads=loads, contended=True)  # fmt: skip
            rows.append(two)
        return _cell(*rows)

    twin = _cell(_synced("ddp", 4.46, 2.57, (0.70, 1.48, 0.29))[1])

    def name(c: pd.DataFrame) -> breakdown.Verdict:
        v = breakdown.verdict(c, twin, breakdown.Group(pd.concat([_cell(one), c]), twin))
        assert v is not None
        return v

    v = name(cell((0.7, 1.3), (0.7, 1.3)))
    assert v.name == "straggler" and "for rank 1 21% of the time, 0.96 ms of a 4.46" in v.evidence
    assert "(53% of the 1.82 ms lost against 1 worker)" in v.evidence
    assert "in 2/2 runs" in v.evidence
    assert name(cell((0.7, 1.3), (1.3, 0.7))).name != "straggler"  # a rank each run
    v = name(cell((0.7, 0.85), (0.7, 0.85)))  # 0.15 ms of each 2.35: 16% of what was lost
    assert (
        v.name != "straggler" and "no straggler: the other ranks wait for rank 1 6%" in v.evidence
    )
    busy = [{"other_cpu_cores": 1.1, "own_cpu_cores": 1.0, "cpu_count": 2, "steal_fraction": 0.0}]
    v = name(cell((0.7, 1.3), (0.7, 1.3), loads=busy))
    assert (
        v.name == "straggler"
        and "the CPUs were shared as well: other processes used 1.10" in v.evidence
    )


def test_the_time_lost_to_scaling_is_split_against_the_1_worker_cell() -> None:
    # the ddp x2: compute did not grow (2.35 -> 2.18 ms), exposed comm 1.89 ms took
    # all of the 1.82 ms lost; compute is still the step's largest share (49% > 42%)
    one = _one_worker("ddp", 2.64, 0.80, 1.55, 0.29)
    two, twin = _synced("ddp", 4.46, 2.57, (0.70, 1.48, 0.29))
    group = breakdown.Group(_cell(one, two), _cell(twin))
    v = breakdown.verdict(_cell(two), _cell(twin), group)
    assert v is not None and v.name == "communication-bound" and v.lost is not None
    assert v.lost.lost == pytest.approx(1.82)
    assert v.lost.parts == pytest.approx(
        {"compute stretch": -0.17, "comm CPU": 0.0, "comm wait": 1.89, "optimizer": 0.0,
         "other": 0.10}, abs=1e-9
    )  # fmt: skip
    assert v.lost.adds_up() and "lost +1.82 ms vs 1 worker (4.46 vs 2.64)" in v.evidence
    assert "bucket" in v.knob and "--threads" not in v.knob
    # read alone, by its largest share, it would say compute, and say what is missing
    alone = breakdown.verdict(_cell(two), _cell(twin), breakdown.Group(_cell(two), _cell(twin)))
    assert alone is not None and alone.name == "compute-bound" and alone.lost is None
    assert "bench run --engines ddp --workers 1 --models mlp" in alone.evidence
    # two one-thread workers plus Gloo's threads fill both CPUs: never more threads
    assert "--threads" not in alone.knob and "a machine with more cores" in alone.knob


def test_compute_stretched_by_shared_cores_and_the_cpu_communication_takes() -> None:
    # the paddle x2: the twin's compute 4.51 ms against 2.80 ms at 1 worker
    one = _one_worker("paddle", 3.0, 0.9, 1.9, 0.2)
    two, twin = _synced("paddle", 5.0, 4.71, (1.5, 3.01, 0.2))
    group = breakdown.Group(_cell(one, two), _cell(twin))
    v = breakdown.verdict(_cell(two), _cell(twin), group)
    assert v is not None and v.name == "compute-stretched" and v.lost is not None
    assert v.lost.parts["compute stretch"] == pytest.approx(1.71)
    assert "1 per node instead of 2" in v.knob and "--threads" not in v.knob
    # saturated cores: the collectives' 12 CPU-ms per step over the twin's, spread over
    # 2 CPUs, hold all 6 ms of exposed time (labelled over an emulated link: each rank
    # counted the whole run on the machine)
    whole = [{"other_cpu_cores": 0.0, "own_cpu_cores": 2.0, "cpu_count": 2}] * 2
    emu = {"loads": whole, "nodes": 2, "emulated": True, "labelled": True}
    two, twin = _synced("ddp", 10.0, 4.0, (1.0, 2.0, 0.5), **emu)
    one = _one_worker("ddp", 3.5, 1.0, 2.0, 0.5)
    v = breakdown.verdict(_cell(two), _cell(twin), breakdown.Group(_cell(one, two), _cell(twin)))
    assert v is not None and v.name == "comm-CPU-bound" and v.lost is not None
    assert v.lost.parts["comm CPU"] == pytest.approx(6.0)
    assert v.lost.parts["comm wait"] == pytest.approx(0.0)
    assert "1 per node instead of 2" in v.knob


def test_the_slower_engine_is_split_against_the_fastest_at_its_worker_count() -> None:
    ddp_one, hvd_one = (
        _one_worker("ddp", 3.5, 1.0, 2.0, 0.5),
        _one_worker("horovod", 3.5, 1.0, 2.0, 0.5),
    )
    ddp, ddp_twin = _synced("ddp", 10.0, 4.0, (1.0, 2.0, 0.5))
    hvd, hvd_twin = _synced("horovod", 14.0, 4.0, (1.0, 2.0, 0.5))
    group = breakdown.Group(_cell(ddp_one, hvd_one, ddp, hvd), _cell(ddp_twin, hvd_twin))
    v = breakdown.verdict(_cell(hvd), _cell(hvd_twin), group)
    assert v is not None and v.behind is not None and v.behind.against == "ddp x2"
    assert v.behind.lost == pytest.approx(4.0) and v.behind.largest() == "comm wait"
    assert "behind by +4.00 ms vs ddp x2" in v.evidence
    fastest = breakdown.verdict(_cell(ddp), _cell(ddp_twin), group)
    assert fastest is not None and fastest.behind is None
    table = breakdown.verdict_rows(group.ok, group.twins)
    assert list(table["behind ms"].fillna(0.0)) == pytest.approx([0.0, 0.0, 0.0, 4.0])


def test_a_cell_that_lost_little_scales() -> None:
    one = _one_worker("ddp", 3.9, 1.0, 2.0, 0.5)
    two, twin = _synced("ddp", 4.0, 3.9, (1.0, 2.0, 0.5))
    v = breakdown.verdict(_cell(two), _cell(twin), breakdown.Group(_cell(one, two), _cell(twin)))
    assert v is not None and v.name == "scales" and v.knob == "nothing: it scales"


def test_compute_and_overhead_are_told_apart_by_the_measured_peak() -> None:
    # 1 worker, 32 samples of 3 MFLOP per 3.5 ms step: 27.4 GFLOP/s of a 40 GFLOP/s peak
    one = _row(workers=1, throughput=32 / 3.5e-3, peak_gflops=40.0, train_flops=3e6)
    v = _verdict(_cell(one), TWIN[:0])
    assert v.name == "compute-bound" and "68.6% of the measured peak" in v.evidence
    # one "of peak" figure: the per-rank table prints the same as the verdict reads
    assert compare._utilisation(_cell(one)) == "68.6%"
    tiny = {**one, "train_flops": 3e4}  # the same time for a hundredth of the work
    v = _verdict(_cell(tiny), TWIN[:0])
    assert v.name == "overhead-bound" and "0.7% of the measured peak" in v.evidence
    assert compare._utilisation(_cell(tiny)) == "0.7%"
    assert "larger --batch-size" in v.knob
    # without a peak the verdict says it could not tell
    v = _verdict(_cell({**one, "peak_gflops": np.nan}), TWIN[:0])
    assert v.name == "compute-bound" and "no peak measured" in v.evidence


def test_records_without_a_breakdown_give_no_table_and_no_verdict() -> None:
    cell = _cell(_row(breakdown={}))
    assert breakdown.rows(cell, TWIN).empty and breakdown.verdict(cell, TWIN) is None
    # a multi-worker cell without its twin: its compute includes the waits, so no guess
    v = _verdict(_cell(_row()), TWIN[:0])
    assert v.name == "undetermined" and "--no-comm-cost" in v.knob


# --- constructed cases: real runs, one cause each --------------------------------------

QUICK = (
    "--epochs",
    "1",
    "--repeats",
    "1",
    "--no-compare",
    "--profile-steps",
    "10",
    *NO_EXTRA_WINDOWS,
)


def _verdicts(results: Path) -> dict[tuple[str, int], str]:
    (comp,) = compare.compare(records.load([results]).records)
    table = comp.sections["verdict"]
    got = {(str(e), int(w)): str(v) for e, w, v in table[["engine", "workers", "verdict"]].values}
    print(table.to_string())  # the evidence, shown when the test fails
    return got


def _shared_cpus(results: Path) -> bool:
    """Whether any run's own contention measure saw other processes or the hypervisor
    take enough CPU for CPU-contended to be the right verdict on some of its runs."""
    return any(
        float(c.get("other_cpu_cores") or 0) > OTHER_CORES_LIMIT
        or float(c.get("steal_fraction") or 0) > breakdown.STEAL_SHARE
        for r in records.load([results]).records
        for c in r.get("contention") or []
        if c
    )


def _sweep(results: Path, *args: str) -> None:
    proc = run_bench("run", "--results", str(results), *QUICK, *args, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]


@pytest.mark.distributed
def test_a_rank_slowed_on_purpose_is_the_straggler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a rank that sleeps is held back by nothing: slower at its own work, it is still
    # what the others wait for, in both runs. A straggler is named before any part of the
    # time lost, so no compute-only twins (and the step is still split without them)
    monkeypatch.setenv("BENCH_TEST_FAULT", "delay:rank=1,ms=20")
    _sweep(tmp_path, "--engines", "ddp", "--workers", "2", "--models", "mlp", "--max-steps", "30",
           "--repeats", "2", "--no-comm-cost")  # fmt: skip
    assert _verdicts(tmp_path) == {("ddp", 2): "straggler"}
    every = {"where the step goes (ms)", "verdict"}
    text = formats.render(records.load([tmp_path]), "text", 0.95, show=every) or ""
    assert "the other ranks wait for rank 1 " in text and "in 2/2 runs" in text
    assert "where the step goes (ms):" in text


@pytest.mark.distributed
@pytest.mark.skipif(netns.available(shaping=True) is not None, reason="no shaped namespaces")
def test_a_slow_link_makes_the_time_lost_to_scaling_communication(tmp_path: Path) -> None:
    # lenet's 39 KB of gradients each way take ~16 ms a step at 20 Mbit whatever the CPU,
    # against a few ms of compute: the time lost against its own 1-worker cell is waiting
    _sweep(tmp_path, "--engines", "ddp", "--workers", "1", "--models", "lenet", "--max-steps", "30")
    _sweep(
        tmp_path,
        *("--engines", "ddp", "--workers", "2", "--models", "lenet", "--max-steps", "30"),
        *("--emulate-link", "20mbit"),
    )
    tables = [c.sections["verdict"] for c in compare.compare(records.load([tmp_path]).records)]
    table = pd.concat(tables)
    print(table.to_string())  # the evidence, shown when the test fails
    (cell,) = [r for _, r in table.iterrows() if r["engine"] == "ddp@2nodes/20mbit"]
    # CPU taken by others comes first where the records measured it (a busy CI host)
    if cell["verdict"] == "CPU-contended":
        assert _shared_cpus(tmp_path)
        return
    assert cell["verdict"] == "communication-bound" and cell["largest part"] == "comm wait"
    assert cell["lost ms"] > 10.0 and "lost +" in cell["evidence"]
    assert "bucket" in cell["try"]


@pytest.mark.distributed
def test_a_tiny_model_is_overhead_bound(tmp_path: Path) -> None:
    peak = run_bench("peak", "--results", str(tmp_path), "--threads", "1", timeout=300)
    assert peak.returncode == 0, peak.stderr[-2000:]
    _sweep(tmp_path, "--engines", "ddp", "--workers", "1", "--models", "mlp",
           "--batch-size", "1", "--max-steps", "60")  # fmt: skip
    # On a machine something else was using, contention comes first, and says so: the
    # record's own contention measure decides which verdict is the right one.
    (rec,) = records.load([tmp_path]).records
    others = max(float((c or {}).get("other_cpu_cores") or 0) for c in rec["contention"])
    expected = "CPU-contended" if others > OTHER_CORES_LIMIT else "overhead-bound"
    assert _verdicts(tmp_path) == {("ddp", 1): expected}


@pytest.mark.distributed
def test_an_input_stage_slowed_on_purpose_is_input_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BENCH_TEST_FAULT", "slow_input:rank=0,ms=10")
    _sweep(tmp_path, "--engines", "ddp", "--workers", "1", "--models", "mlp", "--max-steps", "30")
    assert _verdicts(tmp_path) == {("ddp", 1): "input-bound"}


@pytest.mark.distributed
def test_a_busy_neighbour_makes_the_cell_cpu_contended(busy_neighbour_run: Path) -> None:
    # conftest's run beside two spinning processes (test_contention reads it too)
    assert _verdicts(busy_neighbour_run) == {("ddp", 1): "CPU-contended"}


def _profiled_runs(sweep: SharedSweep) -> list[LoadedRecord]:
    """Each engine and its compute-only twin at 2 workers, profiled and traced (the
    defaults), Horovod's with its timeline armed: the session's sweep, whose plain
    Horovod runs are for other tests."""
    return [
        r
        for r in sweep.records()
        if r["world_size"] == 2 and (r["engine"] != "horovod" or r.get("engine_options"))
    ]


@pytest.mark.distributed
def test_profiled_steps_come_after_the_timed_ones_and_every_engine_records_them(
    shared_sweep: SharedSweep, tmp_path: Path
) -> None:
    recs = _profiled_runs(shared_sweep)
    assert len(recs) == 6  # each engine and its compute-only twin
    for r in recs:
        b = r["breakdown"]
        assert b["after_timed"] and b["steps"] == 10
        # the timed steps are the windows' steps, nothing else: the profiled ones are apart
        assert r["timed_steps"] == sum(r["window_steps"]) == len(r["step_times_s"][0])
        assert all(v is not None and v > 0 for v in b["phases_ms"]["step"])
        synced, engine = r["spec"]["grad_sync"], r["engine"]
        comm = b["comm_ms"]
        if not synced:
            assert comm == [0.0, 0.0] and b["comm_source"].startswith("none")
        elif engine == "ddp":
            assert all(c is not None and c > 0 for c in comm)
        elif engine == "horovod":  # the timeline is rank 0's
            assert comm[0] is not None and comm[0] > 0 and comm[1] is None
        else:
            assert comm == [None, None] and "inside backward" in b["comm_source"]
    table = compare.compare(recs)[0].sections["where the step goes (ms)"]
    # the armed timeline costs Horovod's timed steps: such runs are their own variant
    assert set(table["engine"]) == {"horovod[comm_timeline=true]", "ddp", "paddle"}
    # --profile-steps 0: no breakdown and no trace, the same timed steps
    off = tmp_path / "off"
    proc = run_bench(
        "run",
        *("--results", str(off), "--repeats", "1", "--no-compare", "--no-comm-cost"),
        *("--engines", "ddp", "--workers", "2", *shared.SPEC, "--profile-steps", "0"),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    (rec,) = records.load([off]).records
    (ddp,) = [r for r in recs if r["engine"] == "ddp" and r["spec"]["grad_sync"]]
    assert "breakdown" not in rec and "traces" not in rec
    assert rec["timed_steps"] == ddp["timed_steps"]
    assert frame([rec])["breakdown"].iloc[0] == {}


PROFILERS = {"ddp": "torch.profiler", "horovod": "torch.profiler", "paddle": "paddle.profiler"}
# the category of a range the program opened: torch's record_function, Paddle's RecordEvent
USER_RANGES = ("user_annotation", "PythonUserDefined")


@pytest.mark.distributed
def test_every_engine_keeps_a_trace_its_viewer_opens(shared_sweep: SharedSweep) -> None:
    """A profiled run traces 3 more steps under its engine's profiler: a gzipped
    Chrome-trace JSON in the cell's log folder, named in the record, with a range per
    phase. A compute-only twin keeps none (its steps are the synced cell's, less the
    communication), and nothing is left uncompressed beside the kept files."""
    for r in _profiled_runs(shared_sweep):
        engine, synced = r["engine"], r["spec"]["grad_sync"]
        folder = Path(r["labels"]["log_dir"])
        if not synced:
            assert "traces" not in r and not list(folder.glob("*trace*")), engine
            continue
        trace, *more = r["traces"]
        assert (trace["tool"], trace["format"]) == (PROFILERS[engine], "chrome-json")
        assert trace["steps"] == 3 and trace["ranks"] == [0]
        path = shared_sweep.results / trace["path"]  # relative to the results folder
        assert path.parent.resolve() == folder.resolve() and path.name.endswith(".json.gz")
        plain = ("torch-trace.rank0.json", "paddle-trace.rank0.json", "horovod-timeline.json")
        assert not [n for n in plain if (folder / n).exists()], sorted(folder.iterdir())
        events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
        # the ranges the suite opened, one per phase a traced step; Paddle's export
        # appends each one's duration to its name ("forward[1.234 ms]")
        named = Counter(str(e["name"]).split("[")[0] for e in events if e.get("cat") in USER_RANGES)
        for phase in ("step", "forward", "backward", "optimizer"):
            assert named[phase] == 3, (engine, phase, named)
        if engine == "horovod":  # the armed timeline, over the same steps
            (hvd,) = more
            assert (hvd["tool"], hvd["format"]) == ("horovod timeline", "chrome-json-array")
            assert hvd["steps"] == 3 and hvd["path"].endswith(".json.gz")
            spans = timeline.spans(shared_sweep.results / hvd["path"])
            assert spans and all(b >= a for a, b in spans)
        else:
            assert more == []


@pytest.mark.distributed
def test_a_run_started_by_hand_keeps_its_trace_beside_its_results(tmp_path: Path) -> None:
    """Without `bench run`'s log folder the trace goes to traces/<run id>/ beside the
    results file; --trace-all-ranks keeps every rank's, named by its rank."""
    args = ["--model", "mlp", "--max-steps", "12", "--profile-steps", "2", "--trace-steps", "2",
            "--trace-all-ranks"]  # fmt: skip
    rec = ok_record(*run_engine(Engine.DDP, 2, args, tmp_path))
    (trace,) = rec["traces"]
    assert trace["path"] == f"traces/{rec['run_id']}/torch-trace.rank0.json.gz"
    assert trace["steps"] == 2 and trace["ranks"] == [0, 1]
    for rank in (0, 1):
        path = tmp_path / trace["path"].replace("rank0", f"rank{rank}")
        assert json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
