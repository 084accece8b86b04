"""The scaling model (bench/predict.py) on synthetic records with a known answer."""

from __future__ import annotations

import uuid
from typing import Any, cast

import numpy as np
import pytest

from bench import cli, records
from bench.analysis import frame as runs
from bench.analysis import html, predict, render
from bench.cli.common import EXIT_BAD_INPUT
from bench.records import schema
from bench.records.types import LoadedRecord

GRAD = 109386 * 4  # mlp's float32 parameters on 1x28x28 inputs, 10 classes
ALPHA = 2e-4  # the 2-worker all-reduce latency: two ring steps of 1e-4 s
RATE0 = 1_000_000_000  # the fitted link, bit/s
BUSBW = 0.8 * RATE0 / 8  # its collectives reach 80% of the wire, bytes/s
COMPUTE = 0.010
SYNC = 0.013  # 3 ms of the step is exposed communication


def _train(world: int, step_s: float, *, sync: bool = True, rate: int | None = RATE0,
           windows: int = 5, spread: float = 0.0) -> LoadedRecord:  # fmt: skip
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
        },
        "per_worker_batch": per,
        "global_batch": per * world,
        "window_throughput": [per * world / s for s in steps],
        "throughput": per * world / step_s,
        "dataset": {"input_shape": [1, 28, 28]},
    }
    if rate:
        rec["link"] = {"rate_bps": rate, "emulated": True, "qdisc": "tbf"}
    return cast(LoadedRecord, rec)


def _collective(rate: int | None = RATE0, busbw: float = BUSBW) -> LoadedRecord:
    sizes = [4096, 2**20, 4 * 2**20]
    rec: dict[str, Any] = {
        "kind": "collective",
        "status": "ok",
        "engine": "ddp",
        "world_size": 2,
        "run_id": uuid.uuid4().hex,
        # at 2 workers the ring's 2(n-1)/n traffic factor is 1
        "results": [{"bytes": s, "latency_s": ALPHA + s / busbw, "busbw_gbps": 0.0} for s in sizes],
    }
    if rate:
        rec["link"] = {"rate_bps": rate, "emulated": True, "qdisc": "tbf"}
    return cast(LoadedRecord, rec)


def _measured(**kw: Any) -> list[LoadedRecord]:
    return [_train(2, SYNC, **kw), _train(2, COMPUTE, sync=False, **kw), _collective()]


def _by_hand(n: int, busbw: float = BUSBW, compute: float = COMPUTE) -> float:
    """The documented model, written out: step seconds at n workers."""
    hop = ALPHA / 2

    def comm(k: int, bw: float) -> float:  # one message: the mlp's gradients fit one bucket
        return 2 * (k - 1) / k * GRAD / bw + 1 * 2 * (k - 1) * hop

    hidden_share = (comm(2, BUSBW) - (SYNC - COMPUTE)) / COMPUTE  # at the fitted link
    return compute + max(comm(n, busbw) - hidden_share * compute, 0.0)


def test_ring_allreduce_cost_is_textbook() -> None:
    assert predict.ring_allreduce_s(1e8, 1, 2, 1e8, 0.0) == pytest.approx(1.0)
    assert predict.ring_allreduce_s(1e8, 1, 4, 1e8, 0.0) == pytest.approx(1.5)
    assert predict.ring_allreduce_s(0.0, 4, 4, 1e8, 1e-3) == pytest.approx(4 * 6 * 1e-3)
    assert predict.ring_allreduce_s(1e8, 3, 1, 1e8, 1.0) == 0.0


def test_collective_fit_recovers_latency_and_bus_bandwidth() -> None:
    latency, busbw = predict.fit_collective(_collective()["results"], 2)
    assert latency == pytest.approx(ALPHA) and busbw == pytest.approx(BUSBW)


def test_gradient_bytes_are_the_models_float32_parameters() -> None:
    assert predict.grad_bytes_of("mlp", (1, 28, 28)) == GRAD
    # ResNet-50 on ImageNet: 25.56 M trainable parameters (BatchNorm scale/shift included)
    assert predict.grad_bytes_of("resnet50", (3, 224, 224), 1000) / 4 == pytest.approx(
        25.557e6, rel=1e-3
    )


def test_prediction_matches_the_model_worked_by_hand() -> None:
    (sample,) = predict.samples(_measured())
    fit = sample.fit()
    assert fit.messages == 1 and fit.step_s(2) == pytest.approx(SYNC)  # reproduces the fit
    preds = predict.run([sample], predict.Target(), [8, 64, 512], resamples=20)
    for p in preds:
        step = _by_hand(p.workers)
        assert p.step_s == pytest.approx(step)
        assert p.throughput == pytest.approx(p.workers * 32 / step)
        assert p.efficiency == pytest.approx(COMPUTE / step)
        # windows without spread: the interval is the point
        assert p.throughput_interval == pytest.approx((p.throughput, p.throughput))
    assert [p.efficiency for p in preds] == sorted((p.efficiency for p in preds), reverse=True)


def test_another_link_rate_scales_bus_bandwidth_and_user_inputs_replace_measured_ones() -> None:
    (sample,) = predict.samples(_measured())
    fit = sample.fit()
    target = predict.Target(link_rate_bps=25 * RATE0)
    (p,) = [predict.predict(fit, target, 64)]
    assert p.step_s == pytest.approx(_by_hand(64, busbw=25 * BUSBW))
    given = predict.Target(link_rate_bps=25 * RATE0, busbw_fraction=0.5, compute_s=0.2)
    p = predict.predict(fit, given, 64)
    assert p.step_s == pytest.approx(_by_hand(64, busbw=0.5 * 25 * RATE0 / 8, compute=0.2))
    assert p.efficiency == pytest.approx(0.2 / p.step_s)


def test_spread_in_the_windows_gives_an_interval_around_the_point() -> None:
    (sample,) = predict.samples(_measured(spread=0.1, windows=9))
    (p,) = predict.run([sample], predict.Target(), [64], resamples=200)
    lo, hi = p.throughput_interval
    assert lo < p.throughput < hi and hi / lo > 1.01
    again = predict.run([sample], predict.Target(), [64], resamples=200)[0]
    assert again.throughput_interval == p.throughput_interval  # seeded: reproducible


def test_slowdown_beyond_the_ring_cost_is_kept_as_a_fixed_extra() -> None:
    slow = 0.5  # far more than compute + comm(2): e.g. the engine's thread competing for cores
    (sample,) = predict.samples([_train(2, slow), _train(2, COMPUTE, sync=False), _collective()])
    fit = sample.fit()
    assert fit.hidden_share == 0 and fit.step_s(2) == pytest.approx(slow)
    assert fit.extra_s == pytest.approx(slow - COMPUTE - fit.comm_s)


def test_groups_without_their_inputs_are_skipped_with_the_reason() -> None:
    notes: list[str] = []
    assert predict.samples([_train(2, SYNC), _collective()], notes=notes) == []
    assert "no compute-only step time" in notes[0]
    notes.clear()
    assert predict.samples(_measured()[:2], notes=notes) == []
    assert "bench collectives --emulate-link 1000000000bit --engines ddp" in notes[0]
    # a 1-worker run stands in for a missing twin
    single = _train(1, COMPUTE, rate=None)
    (sample,) = predict.samples([_train(2, SYNC), single, _collective()])
    assert sample.fit().compute_s == pytest.approx(COMPUTE)
    with pytest.raises(predict.PredictError, match="--emulate-link RATE"):
        unknown = predict.samples([_train(2, SYNC, rate=None), single, _collective(rate=None)])
        predict.Target(link_rate_bps=RATE0).busbw(unknown[0].fit())


def test_predictions_are_records_kept_out_of_measured_tables() -> None:
    (sample,) = predict.samples(_measured())
    recs = [predict.to_record(p, ["bench", "predict"]) for p in predict.run([sample], predict.Target(link_rate_bps=25 * RATE0), [8, 512], resamples=10)]  # fmt: skip
    for rec in recs:
        assert schema.validate(rec) is None, schema.validate(rec)
        assert rec["kind"] == "prediction" and "throughput" not in rec
    loaded = cast(list[LoadedRecord], recs)  # as bench compare reads them back
    assert runs.frame(loaded).empty  # no measured table reads them
    text = render.render(records.Loaded(loaded, [], []), "text", 0.95)
    assert text and "MODEL PREDICTIONS, not measurements" in text and "25gbit" in text
    page = html.build(loaded).html
    assert "Model predictions (not measurements)" in page


def test_check_compares_predictions_with_runs_on_other_links() -> None:
    # runs at a second rate made by the model itself: the error must be ~0
    rate1 = 4 * RATE0
    sync1 = _by_hand(2, busbw=4 * BUSBW)
    recs = [*_measured(), _train(2, sync1, rate=rate1), _train(2, COMPUTE, sync=False, rate=rate1),
            _collective(rate=rate1, busbw=4 * BUSBW)]  # fmt: skip
    df, _ = predict.check(recs, RATE0)
    assert list(df["link"]) == ["4gbit"] and abs(df["error"].iloc[0]) < 1e-9
    assert "median absolute error per engine" in predict.render_check(df)
    # steps 25% slower than the model says: it overestimates throughput by 25%
    recs[3] = _train(2, sync1 * 1.25, rate=rate1)
    df, _ = predict.check(recs, RATE0)
    assert df["error"].iloc[0] == pytest.approx(0.25)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--link", "25gb"], "rate '25gb' is not understood"),
        (["--workers", "8,x"], "--workers takes integers"),
        (["--check"], "--check needs --fit-link"),
        (["--busbw-fraction", "1.5", "--link", "1gbit"], "--busbw-fraction must be > 0 and <= 1"),
        (["--compute-ms", "0"], "--compute-ms must be > 0"),
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
    assert rec["predicted"]["efficiency"] == pytest.approx(0.292 / (0.292 + comm))
    assert "stated inputs (what-if)" in capsys.readouterr().out
    assert cli.main(["predict", "--what-if", "resnet50", "--no-write"]) == EXIT_BAD_INPUT
    assert "--what-if states every input; give --compute-ms" in capsys.readouterr().err


def test_a_supplied_compute_time_scales_the_measured_extra() -> None:
    (sample,) = predict.samples([_train(2, 0.5), _train(2, COMPUTE, sync=False), _collective()])
    fit = sample.fit()
    fast = predict.Target(compute_s=COMPUTE / 10)
    comm = fit.comm_s
    assert fast.step_s(fit, 2) == pytest.approx(COMPUTE / 10 + comm + fit.extra_s / 10)
