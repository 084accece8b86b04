"""The CUDA path: NCCL, one GPU per rank, device memory, mixed precision.

Marked `gpu`: skipped on machines without a CUDA GPU, and failed instead when
BENCH_EXPECT_GPU=1 says one must be there (scripts/gpu_check.sh sets it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.engines import Engine
from tests.conftest import ok_record, run_engine

pytestmark = [pytest.mark.gpu, pytest.mark.distributed]
ENGINES = (Engine.HOROVOD, Engine.DDP, Engine.PADDLE)
LENET = ["--model", "lenet", "--device", "cuda", "--max-steps", "40", "--warmup-steps", "5"]


@pytest.fixture(autouse=True)
def _engines_installed(request: pytest.FixtureRequest) -> None:
    """A test of an engine not installed here is skipped, saying so (GPU nodes often
    lack Paddle or Horovod); scripts/gpu_check.sh deselects them and names them."""
    from bench.sweep import engine_unavailable

    callspec = getattr(request.node, "callspec", None)
    engines = [callspec.params["engine"]] if callspec and "engine" in callspec.params else []
    if request.node.name.endswith("_on_two_gpus"):  # both compare Horovod with DDP
        engines = [Engine.HOROVOD, Engine.DDP]
    for engine in engines:
        why = engine_unavailable(engine)
        if why:
            pytest.skip(why)


def _gpu_count() -> int:
    import torch

    if not torch.cuda.is_available():
        pytest.fail("BENCH_EXPECT_GPU=1 but torch sees no CUDA GPU")
    return int(torch.cuda.device_count())


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.value)
def test_one_gpu_per_rank_over_nccl(engine: Engine, tmp_path: Path) -> None:
    workers = min(_gpu_count(), 2)
    rec = ok_record(*run_engine(engine, workers, LENET, tmp_path))
    assert rec["spec"]["device"] == "cuda"
    assert rec["env"]["gpus"], "nvidia-smi found no GPU for the record"
    assert all(mb > 0 for mb in rec["resources"]["peak_gpu_mb"])
    if engine is not Engine.HOROVOD:  # Horovod's versions name its build, not a backend
        assert rec["engine_versions"]["backend"] == "nccl"


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.value)
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_mixed_precision_on_gpu(engine: Engine, precision: str, tmp_path: Path) -> None:
    fp32 = ok_record(*run_engine(engine, 1, LENET, tmp_path / "fp32"))
    amp = ok_record(*run_engine(engine, 1, [*LENET, "--precision", precision], tmp_path / "amp"))
    assert amp["knobs"]["loss_scaling"] is (precision == "fp16")
    shift = np.abs(np.asarray(amp["step_losses"]) / np.asarray(fp32["step_losses"]) - 1)
    assert 0 < shift.max() < 0.1  # lower precision is applied, and training still follows fp32


def test_horovod_and_ddp_agree_on_two_gpus(tmp_path: Path) -> None:
    if _gpu_count() < 2:
        pytest.skip("needs 2 GPUs")
    losses = [
        np.asarray(ok_record(*run_engine(e, 2, LENET, tmp_path / e.value))["step_losses"])
        for e in (Engine.HOROVOD, Engine.DDP)
    ]
    # NCCL's reduction order may differ between the two: close, not bit-identical
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-4)


def test_synchronised_batchnorm_on_two_gpus(tmp_path: Path) -> None:
    """bn_buffers=sync: every engine's SyncBatchNorm, statistics over the global batch."""
    if _gpu_count() < 2:
        pytest.skip("needs 2 GPUs")
    args = ["--model", "resnet18", "--device", "cuda", "--max-steps", "10", "--warmup-steps", "2",
            "--bn-buffers", "sync"]  # fmt: skip
    from bench.sweep import engine_unavailable

    here = [e for e in ENGINES if engine_unavailable(e) is None]  # Paddle where installed
    recs = {e: ok_record(*run_engine(e, 2, args, tmp_path / e.value)) for e in here}
    assert {r["spec"]["bn_buffers"] for r in recs.values()} == {"sync"}
    np.testing.assert_allclose(
        recs[Engine.HOROVOD]["step_losses"], recs[Engine.DDP]["step_losses"], rtol=1e-3
    )


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.value)
def test_peak_memory_is_training_not_staging(engine: Engine, tmp_path: Path) -> None:
    """The peak covers the training loop: not the epoch's staged batches, not evaluation.

    60,000 synthetic 28x28 samples stage about 150 MB of batches per epoch on the device;
    lenet's training itself (weights, optimizer, activations of one batch of 32) needs a
    small fraction of that, so a peak that counted the staged epoch would exceed it.
    """
    _gpu_count()
    args = ["--model", "lenet", "--device", "cuda", "--dataset", "synthetic",
            "--synthetic-samples", "60000", "--epochs", "1", "--warmup-steps", "5"]  # fmt: skip
    rec = ok_record(*run_engine(engine, 1, args, tmp_path))
    staged = rec["resources"]["staged_batches_gpu_mb"][0]
    peak = rec["resources"]["peak_gpu_mb"][0]
    assert staged > 100, staged
    assert 0 < peak < staged / 2, (peak, staged)


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.value)
def test_fp32_is_true_fp32_unless_tf32_allowed(engine: Engine, tmp_path: Path) -> None:
    """TF32 and cuDNN modes are set explicitly on the GPU and read back into the record."""
    _gpu_count()
    off = ok_record(*run_engine(engine, 1, LENET, tmp_path / "off"))["knobs"]["math"]
    on = ok_record(*run_engine(engine, 1, [*LENET, "--allow-tf32", "true"], tmp_path / "on"))
    for math, tf32 in ((off, False), (on["knobs"]["math"], True)):
        assert (math["tf32_matmul"], math["tf32_conv"]) == (tf32, tf32), math
        assert not math["cudnn_benchmark"] and not math["cudnn_deterministic"], math
