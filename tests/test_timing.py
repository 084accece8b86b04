"""The windowed timing protocol changes no trained number, and its windows are right.

The reference below is the timed loop as it was before windows: step, synchronise,
time, per step. Both run in this process on the same adapter, so their losses must
be equal bit for bit.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import pytest

import models
from bench.contract import data as bdata
from bench.contract.prepare import prepare, total_steps
from bench.contract.spec import RunSpec
from bench.core.errors import InputError
from bench.engines import Engine
from bench.measure.window import Measure
from bench.records import packed
from bench.records.types import RunRecord
from runners.adapters.base import EngineAdapter
from runners.protocol import common, timing, train

SPEC = RunSpec(model="mlp", dataset="digits", epochs=2, max_steps=60, warmup_steps=4)


def _per_step_loop(adapter: EngineAdapter, spec: RunSpec) -> tuple[list[float], str]:
    """The previous protocol's loop: every step synchronised and timed on its own."""
    model, dataset, spe = prepare(spec, 1)
    total = total_steps(spec, spe)
    weights = models.init_weights(model, dataset.input_shape, dataset.num_classes, spec.seed)
    adapter.build(model, weights, dataset.input_shape, dataset.num_classes)
    per, step = spec.per_worker_batch(1), 0
    out: list[float] = []
    for epoch in range(spec.epochs):
        order = bdata.epoch_order(spec.seed, epoch, len(dataset.train_y))
        n_steps = min(spe, total - step)
        plan = []
        for s in range(n_steps):
            idx = bdata.shard(order, s, 0, per, 1)
            x = (
                bdata.augment(dataset, idx, spec.seed, epoch)
                if spec.augment
                else dataset.train_x[idx]
            )
            batch = adapter.to_batch(x, dataset.train_y[idx])
            plan.append((batch, spec.lr_at(step + s, spe, 1, total)))
        pending = []
        for batch, lr in plan:
            pending.append(adapter.train_step(batch, lr))
            adapter.synchronize()
            step += 1
        out.extend(adapter.loss_value(loss) for loss in pending)
        if step >= total:
            break
    return out, models.weights_fingerprint(adapter.state())


def _protocol(adapter: EngineAdapter, spec: RunSpec, measure: Measure) -> RunRecord:
    model, dataset, spe = prepare(spec, 1)
    record = cast(RunRecord, {})  # train fills in what a run adds to new_record's fields
    train.train(adapter, model, dataset, spe, record, True, None, measure)
    return record


@pytest.mark.parametrize("engine", [Engine.DDP, Engine.PADDLE], ids=lambda e: e.value)
def test_windowed_losses_equal_per_step_losses(engine: Engine) -> None:
    adapter = common.load_adapter(engine)(SPEC)
    adapter.init()
    try:
        expected, final_fp = _per_step_loop(adapter, SPEC)
        plain = _protocol(adapter, SPEC, Measure(window_steps=3, target_ci=0))
        assert plain["step_losses"] == expected  # bit for bit
        assert plain["fingerprints"]["final_weights"] == final_fp
        assert plain["measurement"]["stopped_by"] == "disabled"
        assert plain["measurement"]["extra_steps"] == 0
        # 60 steps, 4 of warm-up: 56 timed, in windows of 3 that restart each epoch
        assert plain["timed_steps"] == 56 == sum(plain["window_steps"])
        assert len(plain["step_times_s"][0]) == 56
        assert max(plain["window_steps"]) == 3
        # each window's throughput, read off the window times, is what the run measured by
        tput = packed.window_throughput(cast(dict, plain))
        assert tput is not None and tput.shape == (len(plain["window_steps"]),)
        assert np.median(tput) == pytest.approx(plain["measurement"]["window_median"], rel=1e-12)
        assert "window_throughput" not in plain  # written out no more (schema 5)
        # measuring on after training changes neither the losses nor the trained weights
        longer = _protocol(adapter, SPEC, Measure(window_steps=3, target_ci=1e-9, cap_s=0.3))
        assert longer["step_losses"] == expected
        assert longer["fingerprints"]["final_weights"] == final_fp
        assert longer["measurement"]["stopped_by"] == "time_cap"
        assert longer["measurement"]["extra_steps"] > 0
        assert longer["timed_steps"] == 56 + longer["measurement"]["extra_steps"]
    finally:
        adapter.shutdown()


def test_windows_split_epochs_and_warmup() -> None:
    w = timing._windows
    assert w(0, 10, 4, 3) == [(0, 4, False), (4, 7, True), (7, 10, True)]
    assert w(10, 5, 4, 3) == [(0, 3, True), (3, 5, True)]  # warm-up done in an earlier epoch
    assert w(0, 3, 5, 3) == [(0, 3, False)]  # the whole epoch is warm-up
    assert w(3, 5, 5, 10) == [(0, 2, False), (2, 5, True)]  # warm-up ends inside this epoch


def test_window_estimate_needs_six_windows() -> None:
    est, half = timing._window_estimate([100.0] * 5)
    assert half is None  # below 6 windows no order-statistic interval: keep measuring
    est, half = timing._window_estimate([100.0, 101.0, 99.0, 100.0, 100.5, 99.5])
    assert est.low == 99.0 and est.high == 101.0 and half == pytest.approx(0.01)


def test_measure_flags_are_checked() -> None:
    with pytest.raises(InputError, match="--target-ci"):
        Measure(target_ci=2).check()
    with pytest.raises(InputError, match="--window-steps"):
        Measure(window_steps=0).check()
    np.testing.assert_equal(Measure().target_ci, 0.02)
