"""Settings where the engines' frameworks do different maths by default, made equal.

Measured on the 2-core CPU machine (torch 2.13.0, horovod 0.28.1, paddle 3.3.1):
- Horovod vs DDP at 2 workers, mlp on digits, 12 steps, every optimizer the spec
  allows, with and without weight decay 5e-4: step losses bit-identical (asserted:
  step 0 exactly equal, the rest to 1e-6 relative). Before the fix, Horovod's
  broadcast_optimizer_state took a zero-gradient step at set-up, so with weight decay
  the two differed from step 0 (SGD: ~4e-6 relative; Adam: every weight moved by lr).
- fp16 gradient compression under a 2^16 loss scale, 2 workers: Horovod and DDP skip
  the same steps and average to the same bits on the others.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import models
from bench import engines, records
from bench.contract import data
from bench.contract.spec import Optimizer, RunSpec, SpecError
from bench.core import machine as env
from bench.engines import Engine
from bench.tables import compare, frame
from runners.adapters.base import EngineAdapter
from runners.protocol.common import load_adapter
from tests import shared_sweep as shared
from tests.conftest import ROOT, RUN_TIMEOUT_S, ok_record, run_engine
from tests.shared_sweep import SharedSweep

TORCH_ENGINES = (Engine.HOROVOD, Engine.DDP)
PROBE = ROOT / "tests" / "probes" / "fp16_compression.py"


# Each optimizer once, and weight decay on and off: both engines build their optimizer
# in one shared place (runners/adapters/torch_base.py), where weight decay is one argument
# of either optimizer, so the other two pairings would run the same code again.
OPTIMIZERS = [("sgd", "0"), ("adam", "5e-4")]


@pytest.mark.distributed
@pytest.mark.parametrize(
    ("optimizer", "weight_decay"), OPTIMIZERS, ids=[f"{o}-{w}" for o, w in OPTIMIZERS]
)
def test_horovod_starts_where_ddp_starts(
    optimizer: str, weight_decay: str, tmp_path: Path, shared_sweep: SharedSweep
) -> None:
    """Same weights and optimizer state after set-up, so the same losses from step 0.
    SGD without weight decay is the spec's default: the session's sweep's 2-worker runs."""
    assert {o for o, _ in OPTIMIZERS} == {o.value for o in Optimizer}  # each one, still
    lr = {"sgd": "0.05", "adam": "0.001"}[optimizer]
    if (optimizer, weight_decay) == ("sgd", "0"):
        recs = {e: shared_sweep.run(e.value, 2) for e in TORCH_ENGINES}
    else:
        args = [*shared.RUNNER_SPEC, "--optimizer", optimizer, "--lr", lr]
        args += ["--weight-decay", weight_decay]
        recs = {e: ok_record(*run_engine(e, 2, args, tmp_path)) for e in TORCH_ENGINES}
    hvd, ddp = recs[Engine.HOROVOD], recs[Engine.DDP]
    assert hvd["spec"]["optimizer"] == ddp["spec"]["optimizer"] == optimizer
    assert hvd["spec"]["lr"] == ddp["spec"]["lr"] == float(lr)
    assert hvd["spec"]["weight_decay"] == ddp["spec"]["weight_decay"] == float(weight_decay)
    for key in ("init_weights", "init_optimizer_state_tensors"):
        assert hvd["fingerprints"][key] == ddp["fingerprints"][key], key
    assert hvd["fingerprints"]["init_optimizer_state_tensors"] == 0  # nothing seeded
    assert hvd["step_losses"][0] == ddp["step_losses"][0]
    np.testing.assert_allclose(hvd["step_losses"], ddp["step_losses"], rtol=1e-6, atol=0)


def _probe(engine: Engine, out: Path) -> list[dict[str, Any]]:
    argv = engines.local_argv(
        engine, 2, ["--engine", engine.value, "--out", str(out)], script=PROBE
    )
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=ROOT,
                          stdin=subprocess.DEVNULL)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["world_size"] == 2
    steps: list[dict[str, Any]] = result["steps"]
    return steps


@pytest.mark.distributed
def test_fp16_compression_skips_the_same_steps(tmp_path: Path) -> None:
    """One fp16 compression for both engines: cast, divide by the world size, then sum.

    Both ranks train the same batch under a 2^16 loss scale while the gradients grow
    1.5x per step (tests/probes/fp16_compression.py). Summing in fp16 before dividing
    overflows where each rank's gradient still fits (between 32752 and 65504 scaled),
    so Horovod's Compression.fp16 with op=Average skipped steps DDP took.
    """
    runs = {e: _probe(e, tmp_path / f"{e.value}.json") for e in TORCH_ENGINES}
    hvd, ddp = runs[Engine.HOROVOD], runs[Engine.DDP]
    skipped = [s["skipped"] for s in ddp]
    assert any(skipped) and not all(skipped), skipped  # the sweep crosses the overflow
    assert [s["skipped"] for s in hvd] == skipped
    assert [s["scale"] for s in hvd] == [s["scale"] for s in ddp]
    assert ddp[0]["scale"] == 2.0**16
    taken = [i for i, s in enumerate(skipped) if not s]
    assert [hvd[i]["max_abs_grad"] for i in taken] == [ddp[i]["max_abs_grad"] for i in taken]


@pytest.fixture(scope="module", params=[e.value for e in Engine])
def adapter(request: pytest.FixtureRequest) -> Iterator[EngineAdapter]:
    """One in-process adapter per engine at world size 1, lenet on digits, batch 16."""
    env.set_thread_env(1)
    spec = RunSpec.from_dict({"model": "lenet", "batch_size": 16, "threads": 1, "device": "cpu"})
    adapter = load_adapter(Engine(request.param))(spec)
    adapter.init()
    ds = data.load_digits(seed=0, test_fraction=0.2)
    model = models.get("lenet")
    adapter.build(model, models.init_weights(model, ds.input_shape, 10, 0), ds.input_shape, 10)
    yield adapter
    adapter.shutdown()


def _forward_batches(adapter: EngineAdapter) -> list[int]:
    """Register a hook that records the batch size of every forward of the bare model."""
    sizes: list[int] = []
    layer = getattr(adapter, "module", None) or getattr(adapter, "layer")  # noqa: B009
    layer.register_forward_pre_hook(lambda _m, inputs: sizes.append(int(inputs[0].shape[0])))
    return sizes


def test_evaluation_runs_in_training_sized_batches(adapter: EngineAdapter) -> None:
    """One forward over a whole test split can need gigabytes of device memory."""
    ds = data.load_digits(seed=0, test_fraction=0.2)
    x, y = ds.test_x[:100], ds.test_y[:100]
    sizes = _forward_batches(adapter)
    loss_sum, correct, count = adapter.evaluate(x, y)
    assert sizes == [16] * 6 + [4]
    assert count == 100 and 0 <= correct <= 100
    # the same numbers as one sample at a time
    one = [adapter.evaluate(x[i : i + 1], y[i : i + 1]) for i in range(100)]
    assert correct == sum(c for _, c, _ in one)
    assert loss_sum == pytest.approx(sum(v for v, _, _ in one), rel=1e-5)


def test_each_step_trains_at_the_learning_rate_it_is_given(adapter: EngineAdapter) -> None:
    """The rate a step is given is the one applied, repeated or changed (Paddle sets it
    only when it changes). At rate 0 SGD with momentum leaves the weights alone."""
    ds = data.load_digits(seed=0, test_fraction=0.2)
    batch = adapter.to_batch(ds.train_x[:16], ds.train_y[:16])

    def moved(lr: float) -> bool:
        before = adapter.state()
        adapter.train_step(batch, lr)
        return any(not np.array_equal(before[k], v) for k, v in adapter.state().items())

    assert [moved(lr) for lr in (0.05, 0.0, 0.0, 0.05, 0.05, 0.0)] == [
        True, False, False, True, True, False
    ]  # fmt: skip


def test_fp32_maths_set_and_recorded(adapter: EngineAdapter) -> None:
    """True fp32 unless allow_tf32: TF32 and cuDNN modes set explicitly, read back into knobs."""
    math = adapter.knobs()["math"]
    assert {k: math[k] for k in frame.MATH_KEYS} == {k: False for k in frame.MATH_KEYS}
    if adapter.engine is not Engine.PADDLE:  # torch's own read-back of what was set
        assert math["native"]["cuda.matmul.fp32_precision"] == "ieee"
        assert math["native"]["cudnn.conv.fp32_precision"] == "ieee"  # torch's default: tf32


def test_allow_tf32_is_refused_on_cpu() -> None:
    with pytest.raises(SpecError, match="allow_tf32=true needs device=cuda"):
        RunSpec.from_dict({"allow_tf32": True, "device": "cpu"}).validate()
    assert RunSpec.from_dict({"allow_tf32": True, "device": "cuda"}).validate().allow_tf32


def test_compare_shows_fp32_maths(tmp_path: Path) -> None:
    golden = records.load([Path(__file__).parent / "data" / "golden.jsonl"]).records
    ok = [r for r in golden if r["status"] == "ok"]
    math = {k: False for k in frame.MATH_KEYS}
    for r in ok:
        r["knobs"] = {**(r.get("knobs") or {}), "math": {**math, "nvidia_tf32_override": None}}
    text = "\n".join(compare.compare(ok)[0].notes)
    assert "fp32 maths identical across engines: tf32 matmul off, tf32 conv off" in text
    ok[0]["knobs"]["math"]["tf32_matmul"] = True
    text = "\n".join(compare.compare(ok)[0].notes)
    assert "WARNING: fp32 maths differ between runs" in text and "tf32 matmul on" in text
