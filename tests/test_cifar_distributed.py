"""CIFAR-10 (standard binary files, augmented) under every engine, tiny sizes, real processes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from bench.engines import Engine

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module")
def runs(resnet18_two_workers: dict[str, dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    """Every engine at 2 workers on the CIFAR-10 files: conftest's `resnet18_two_workers`,
    which test_resnet_distributed reads too."""
    return {(engine, 2): rec for engine, rec in resnet18_two_workers.items()}


def test_every_engine_sees_the_same_augmented_data(
    runs: dict[tuple[str, int], dict[str, Any]],
) -> None:
    for n in (2,):
        fps = [runs[e.value, n]["fingerprints"] for e in Engine]
        for key in ("init_weights", "data_order"):
            assert len({f[key] for f in fps}) == 1, (n, key, fps)
        assert len({runs[e.value, n]["dataset"]["fingerprint"] for e in Engine}) == 1
    # the same pixels reach every engine, so Horovod and DDP stay identical throughout
    for n in (2,):
        np.testing.assert_allclose(
            runs["horovod", n]["step_losses"], runs["ddp", n]["step_losses"], rtol=1e-6
        )
        # paddle: exact at step 0; BatchNorm rounding drifts after (see test_resnet_distributed)
        np.testing.assert_allclose(
            runs["paddle", n]["step_losses"][0], runs["ddp", n]["step_losses"][0], rtol=1e-5
        )


def test_input_pipeline_time_is_recorded(runs: dict[tuple[str, int], dict[str, Any]]) -> None:
    for (_, n), rec in runs.items():
        pipe = rec["input_pipeline"]
        assert pipe["augmented"] is True and rec["spec"]["augment"] is True
        assert len(pipe["ms_per_step"]) == n and all(ms > 0 for ms in pipe["ms_per_step"])
        assert pipe["vs_step_time"] > 0
