"""The model contract and the numpy side every framework shares.

Canonical weight layout is PyTorch's (Linear weight [out, in], Conv weight
[out, in, kh, kw]); the paddle loader transposes Linear weights, since paddle
stores them as [in, out].
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np

from bench.core import streams
from bench.core.streams import Stream

Weights = dict[str, np.ndarray]
Shape = tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class ModelDef:
    """One reference model.

    `param_shapes(input_shape, classes)` gives the canonical name -> shape map
    (with fan-in per tensor) from which numpy initialises; `torch(...)` and
    `paddle(...)` build an uninitialised module whose parameter names match it.
    `check_input(shape)` raises ValueError when the model cannot take that input.
    """

    name: str
    description: str
    default_dataset: str
    default_batch: int
    synthetic_shape: Shape  # input shape used with the synthetic dataset
    param_shapes: Callable[[Shape, int], dict[str, tuple[Shape, int]]]
    torch: Callable[..., Any]  # (input_shape, classes, bn_momentum=, bn_eps=) -> nn.Module
    paddle: Callable[..., Any]  # same arguments -> paddle.nn.Layer
    check_input: Callable[[Shape], None]
    # name -> (shape, value) for tensors that start at a constant (BatchNorm scale,
    # shift and running statistics)
    constants: Callable[[Shape, int], dict[str, tuple[Shape, float]]] | None = None
    # forward FLOPs per sample (2 per multiply-add); training is counted as 3x forward
    flops: Callable[[Shape, int], int] | None = None
    # True: the model reads token ids [seq] and predicts the next token at every
    # position (classes is the vocabulary); False: it classifies one input tensor
    tokens: bool = False


def init_weights(model: ModelDef, input_shape: Shape, num_classes: int, seed: int) -> Weights:
    """Initial weights for (model, seed) in numpy float32, PyTorch's default rule.

    Uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases is what
    torch's kaiming_uniform_(a=sqrt(5)) default amounts to; drawing it here, in
    sorted name order from one seeded stream, makes it framework-independent.
    """
    model.check_input(input_shape)
    rng = streams.rng(seed, Stream.INIT)
    weights: Weights = {}
    for name, (shape, fan_in) in sorted(model.param_shapes(input_shape, num_classes).items()):
        bound = 1.0 / np.sqrt(fan_in)
        weights[name] = rng.uniform(-bound, bound, size=shape).astype(np.float32)
    if model.constants is not None:
        for name, (shape, value) in model.constants(input_shape, num_classes).items():
            weights[name] = np.full(shape, value, dtype=np.float32)
    return weights


def weights_fingerprint(weights: Weights) -> str:
    """Order-independent hash of named float32 arrays in canonical layout."""
    h = hashlib.sha256()
    for name in sorted(weights):
        arr = np.ascontiguousarray(weights[name], dtype=np.float32)
        h.update(name.encode())
        h.update(str(arr.shape).encode())
        h.update(arr.tobytes())
    return h.hexdigest()[:16]
