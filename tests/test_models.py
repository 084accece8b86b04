"""Torch and paddle modules built from one numpy init compute the same function."""

from __future__ import annotations

import numpy as np
import pytest

import models
from bench.contract.spec import RunSpec

CASES = [
    ("mlp", (1, 8, 8)),
    ("mlp", (1, 28, 28)),
    ("lenet", (1, 8, 8)),
    ("lenet", (1, 28, 28)),
    ("resnet18", (3, 32, 32)),
    ("resnet50", (3, 64, 64)),
    ("transformer", (16,)),
]


def test_every_model_is_covered() -> None:
    assert {name for name, _ in CASES} == set(models.names())


@pytest.mark.parametrize(("name", "shape"), CASES)
def test_torch_and_paddle_forward_agree(name: str, shape: tuple[int, ...]) -> None:
    """Same numpy weights, same input: same logits (train mode, so BatchNorm uses batch stats)."""
    import paddle
    import torch

    from runners.adapters.ddp_engine import DDPAdapter
    from runners.adapters.paddle_engine import PaddleAdapter

    model = models.get(name)
    weights = models.init_weights(model, shape, 10, seed=7)
    assert all(w.dtype == np.float32 for w in weights.values())
    spec = RunSpec(model=name)
    rng = np.random.default_rng(0)
    x = (
        rng.integers(0, 10, (4, *shape))  # token ids for a language model (vocabulary 10)
        if model.tokens
        else rng.standard_normal((4, *shape)).astype(np.float32)
    )
    # Each adapter owns its framework's loading (paddle's [in, out] Linear, BatchNorm
    # buffer names, torch's step counter); use them as the runners do.
    torch_adapter = DDPAdapter(spec)
    torch_adapter._build_module(model, weights, shape, 10)
    paddle_adapter = PaddleAdapter(spec)
    paddle_adapter._parallel = False
    paddle_adapter.build(model, weights, shape, 10)
    # reading the weights back gives the canonical layout, bit for bit (before a
    # train-mode forward updates BatchNorm's running statistics)
    assert models.weights_fingerprint(paddle_adapter.state()) == models.weights_fingerprint(weights)
    assert models.weights_fingerprint(torch_adapter.state()) == models.weights_fingerprint(weights)
    out_t = torch_adapter.module(torch.from_numpy(x)).detach().numpy()
    out_p = paddle_adapter.layer(paddle.to_tensor(x)).numpy()
    np.testing.assert_allclose(out_p, out_t, rtol=1e-4, atol=1e-4)


def _flops(name: str, shape: tuple[int, ...], classes: int) -> int:
    flops = models.get(name).flops
    assert flops is not None
    return flops(shape, classes)


def test_flops_per_sample_match_published_counts() -> None:
    # multiply-adds: ResNet-50 at 224x224 4.1 G (He et al.), ResNet-18 CIFAR 0.56 G
    assert _flops("resnet50", (3, 224, 224), 1000) / 2 == pytest.approx(4.1e9, rel=0.02)
    assert _flops("resnet18", (3, 32, 32), 10) / 2 == pytest.approx(0.556e9, rel=0.02)
    lenet_macs = 10 * 25 * 24 * 24 + 20 * 250 * 8 * 8 + 320 * 50 + 500
    assert _flops("lenet", (1, 28, 28), 10) / 2 == lenet_macs


def test_transformer_flops_follow_its_parameter_table() -> None:
    """2 FLOPs per weight per token for every matrix product except the embeddings'
    lookups, plus the attention products (scores and weighted sum: 4 T^2 d per layer)."""
    from models import transformer as tr

    seq, vocab = 64, 61
    shapes = models.get("transformer").param_shapes((seq,), vocab)
    matmul = sum(
        int(np.prod(shape))
        for name, (shape, _) in shapes.items()
        if name.endswith(".weight") and not name.startswith(("tok.", "pos."))
    )
    attention = tr.LAYERS * 4 * seq * seq * tr.WIDTH
    assert _flops("transformer", (seq,), vocab) == 2 * seq * matmul + attention


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
