from __future__ import annotations

import json

import pytest

from bench.contract.spec import LRRule, RunSpec, Scaling, SpecError


def test_round_trips_through_json() -> None:
    spec = RunSpec(
        model="mlp", batch_size=16, scaling=Scaling.STRONG, lr_rule=LRRule.SQRT, max_steps=9
    )
    again = RunSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again == spec
    assert again.scaling is Scaling.STRONG


def test_unknown_keys_are_named() -> None:
    with pytest.raises(SpecError, match=r"unknown spec field.*batchsize"):
        RunSpec.from_dict({"batchsize": 3})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"batch_size": "32"}, "batch_size must be an integer"),
        ({"batch_size": True}, "batch_size must be an integer"),
        ({"lr": "fast"}, "lr must be a float"),
        ({"optimizer": "lamb"}, "optimizer='lamb' is not one of: sgd, adam"),
        ({"scaling": "diagonal"}, "scaling='diagonal'"),
    ],
)
def test_wrong_types_are_named(data: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        RunSpec.from_dict(data)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"batch_size": 0}, "batch_size must be >= 1"),
        ({"epochs": -1}, "epochs must be >= 1"),
        ({"lr": 0.0}, "lr must be > 0"),
        ({"momentum": 1.5}, "momentum must be in"),
        ({"max_steps": 3, "warmup_steps": 3}, "leaves no timed step"),
        ({"precision": "fp16", "device": "cpu"}, "needs device=cuda"),
        ({"test_fraction": 1.0}, "test_fraction"),
    ],
)
def test_contradictions_are_refused(changes: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        RunSpec().replace(**changes).validate()


def test_strong_scaling_batch_must_divide() -> None:
    spec = RunSpec(batch_size=30, scaling=Scaling.STRONG)
    assert spec.per_worker_batch(2) == 15
    with pytest.raises(SpecError, match="does not divide among 4 workers"):
        spec.validate(4)


def test_zero_workers_refused() -> None:
    with pytest.raises(SpecError, match="world size must be >= 1"):
        RunSpec().validate(0)


def test_learning_rate_rules() -> None:
    weak = RunSpec(lr=0.1, batch_size=32, lr_schedule="constant")  # type: ignore[arg-type]
    assert weak.replace(lr_rule="constant").scaled_lr(4) == pytest.approx(0.1)
    assert weak.replace(lr_rule="linear").scaled_lr(4) == pytest.approx(0.4)
    assert weak.replace(lr_rule="sqrt").scaled_lr(4) == pytest.approx(0.2)
    # strong scaling keeps the global batch, so no rule changes the rate
    assert weak.replace(scaling="strong", lr_rule="linear").scaled_lr(4) == pytest.approx(0.1)


def test_warmup_then_cosine() -> None:
    spec = RunSpec(lr=0.1, lr_rule=LRRule.LINEAR, lr_warmup_epochs=1.0)
    # 10 steps per epoch, 2 workers, 100 steps: ramps 0.1 -> 0.2 over the first epoch
    assert spec.lr_at(0, 10, 2, 100) == pytest.approx(0.1)
    assert spec.lr_at(5, 10, 2, 100) == pytest.approx(0.15)
    assert spec.lr_at(10, 10, 2, 100) == pytest.approx(0.2)
    assert spec.lr_at(55, 10, 2, 100) == pytest.approx(0.1)  # cosine half way
    assert spec.lr_at(99, 10, 2, 100) < 0.001


def test_synchronised_batchnorm_is_refused_on_cpu() -> None:
    with pytest.raises(SpecError, match="bn_buffers=sync needs device=cuda"):
        RunSpec.from_dict({"model": "resnet18", "bn_buffers": "sync", "device": "cpu"}).validate()
