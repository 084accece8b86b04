"""A two-hidden-layer perceptron on flattened inputs: the smallest model that trains."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from models.base import ModelDef, Shape

HIDDEN = (128, 64)


def _dims(input_shape: Shape, classes: int) -> list[int]:
    return [int(np.prod(input_shape)), *HIDDEN, classes]


def param_shapes(input_shape: Shape, classes: int) -> dict[str, tuple[Shape, int]]:
    dims = _dims(input_shape, classes)
    shapes: dict[str, tuple[Shape, int]] = {}
    for i, (d_in, d_out) in enumerate(itertools.pairwise(dims)):
        shapes[f"fc{i + 1}.weight"] = ((d_out, d_in), d_in)
        shapes[f"fc{i + 1}.bias"] = ((d_out,), d_in)
    return shapes


def build_torch(input_shape: Shape, classes: int, **_: Any) -> Any:
    import torch
    from torch import nn

    dims = _dims(input_shape, classes)

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = nn.Linear(dims[0], dims[1])
            self.fc2 = nn.Linear(dims[1], dims[2])
            self.fc3 = nn.Linear(dims[2], dims[3])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = torch.flatten(x, 1)
            x = torch.relu(self.fc1(x))
            x = torch.relu(self.fc2(x))
            return self.fc3(x)

    return MLP()


def build_paddle(input_shape: Shape, classes: int, **_: Any) -> Any:
    import paddle
    from paddle import nn

    dims = _dims(input_shape, classes)

    class MLP(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = nn.Linear(dims[0], dims[1])
            self.fc2 = nn.Linear(dims[1], dims[2])
            self.fc3 = nn.Linear(dims[2], dims[3])

        def forward(self, x: Any) -> Any:
            x = paddle.flatten(x, 1)
            x = nn.functional.relu(self.fc1(x))
            x = nn.functional.relu(self.fc2(x))
            return self.fc3(x)

    return MLP()


def check_input(input_shape: Shape) -> None:
    if not input_shape or int(np.prod(input_shape)) < 1:
        raise ValueError(f"mlp needs a non-empty input, got shape {input_shape}")


def flops(input_shape: Shape, classes: int) -> int:
    dims = _dims(input_shape, classes)
    return sum(2 * a * b for a, b in itertools.pairwise(dims))


MODEL = ModelDef(
    name="mlp",
    description="MLP 128-64 on flattened input",
    default_dataset="digits",
    default_batch=32,
    synthetic_shape=(1, 28, 28),
    param_shapes=param_shapes,
    torch=build_torch,
    paddle=build_paddle,
    check_input=check_input,
    flops=flops,
)
