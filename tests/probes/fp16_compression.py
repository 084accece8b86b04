#!/usr/bin/env python3
"""Probe: fp16-compressed gradient averaging under a 2^16 loss scale, through an engine's adapter.

Launched by tests/test_identical_maths.py with each engine's own launcher. Every rank
trains the same batch (so the summed gradient is exactly world x each rank's), through
the adapter's real build and train_step, with fp16 compression and a loss scaler set
like the fp16 runs' (initial scale 2^16). The inputs grow 1.5x per step, so the
gradients sweep through the range where an fp16 sum overflows before a pre-divided one
does. Rank 0 writes, per step, whether the scaler skipped it, the scale, and the
largest averaged gradient, as JSON to --out.

fp16 autocast needs a GPU; the loss scaler and the compressed allreduce do not, so the
scaler is enabled on CPU here (the spec keeps fp32 autocast-free).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parent.parent.parent))

import numpy as np

import models
from bench.contract.prepare import prepare
from bench.contract.spec import RunSpec
from bench.core import machine as benv
from bench.engines import Engine
from runners.protocol.common import load_adapter


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--engine", required=True, choices=[e.value for e in Engine])
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=24)
    args = parser.parse_args()
    benv.set_thread_env(1)
    spec = RunSpec.from_dict(
        {"model": "mlp", "dataset": "digits", "device": "cpu", "grad_compression": "fp16",
         "batch_size": 16, "threads": 1}
    )  # fmt: skip
    adapter = load_adapter(Engine(args.engine))(spec)
    model, dataset, _ = prepare(spec, adapter.expected_world_size())
    adapter.init()
    weights = models.init_weights(model, dataset.input_shape, dataset.num_classes, spec.seed)
    adapter.build(model, weights, dataset.input_shape, dataset.num_classes)

    import torch

    from runners.adapters.base import LOSS_SCALER

    adapter._scaler = torch.amp.GradScaler("cpu", **LOSS_SCALER)  # type: ignore[attr-defined]
    x, y = dataset.train_x[:16], dataset.train_y[:16]
    steps = []
    for k in range(args.steps):
        scale = float(adapter._scaler.get_scale())  # type: ignore[attr-defined]
        # lr 0: the weights stay put, only the gradients' size changes with the inputs
        loss = adapter.train_step(adapter.to_batch(x * np.float32(1.5**k), y), 0.0)
        after = float(adapter._scaler.get_scale())  # type: ignore[attr-defined]
        grads = [p.grad for p in adapter.module.parameters()]  # type: ignore[attr-defined]
        steps.append(
            {
                "scale": scale,
                "skipped": after < scale,
                "loss": adapter.loss_value(loss),
                "max_abs_grad": float(max(g.abs().max() for g in grads if g is not None)),
            }
        )
    adapter.barrier()
    if adapter.rank == 0:
        Path(args.out).write_text(json.dumps({"world_size": adapter.world_size, "steps": steps}))
    adapter.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
