"""Torch and paddle modules built from one numpy init compute the same function."""

from __future__ import annotations

import numpy as np
import pytest

import models
from bench.spec import RunSpec


@pytest.mark.parametrize("name", models.names())
@pytest.mark.parametrize("shape", [(1, 8, 8), (1, 28, 28)])
def test_torch_and_paddle_forward_agree(name: str, shape: tuple[int, ...]) -> None:
    import paddle
    import torch

    from runners.engines.paddle_engine import PaddleAdapter
    from runners.engines.torch_engines import DDPAdapter

    model = models.get(name)
    weights = models.init_weights(model, shape, 10, seed=7)
    assert all(w.dtype == np.float32 for w in weights.values())

    x = np.random.default_rng(0).standard_normal((4, *shape)).astype(np.float32)
    t = model.torch(shape, 10)
    t.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
    # The paddle adapter owns the [in, out] transposition; use it as the runner does.
    spec = RunSpec(model=name)
    adapter = PaddleAdapter(spec)
    adapter._parallel = False
    adapter.build(model, weights, shape, 10)
    out_t = t(torch.from_numpy(x)).detach().numpy()
    out_p = adapter.layer(paddle.to_tensor(x)).numpy()
    np.testing.assert_allclose(out_p, out_t, rtol=1e-5, atol=1e-5)
    # reading the weights back gives the canonical layout, bit for bit
    assert models.weights_fingerprint(adapter.state()) == models.weights_fingerprint(weights)
    torch_adapter = DDPAdapter(spec)
    torch_adapter._build_module(model, weights, shape, 10)
    assert models.weights_fingerprint(torch_adapter.state()) == models.weights_fingerprint(weights)


def test_init_depends_on_seed_only() -> None:
    m = models.get("lenet")
    a = models.weights_fingerprint(models.init_weights(m, (1, 8, 8), 10, seed=0))
    assert a == models.weights_fingerprint(models.init_weights(m, (1, 8, 8), 10, seed=0))
    assert a != models.weights_fingerprint(models.init_weights(m, (1, 8, 8), 10, seed=1))


def test_lenet_is_the_classic_network_on_28x28() -> None:
    shapes = models.get("lenet").param_shapes((1, 28, 28), 10)
    assert shapes["conv1.weight"][0] == (10, 1, 5, 5)
    assert shapes["conv2.weight"][0] == (20, 10, 5, 5)
    assert shapes["fc1.weight"][0] == (50, 320)
    assert shapes["fc2.weight"][0] == (10, 50)


def test_lenet_refuses_inputs_it_cannot_take() -> None:
    with pytest.raises(ValueError, match="1-channel images"):
        models.get("lenet").check_input((3, 32, 32))


def test_unknown_model_lists_known_ones() -> None:
    with pytest.raises(
        models.UnknownModelError, match="unknown model 'vgg'; choose one of: lenet, mlp"
    ):
        models.get("vgg")
