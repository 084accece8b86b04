"""LeNet, the classic MNIST network: conv 1->10 k5, pool, conv 10->20 k5, pool, fc ->50 ->10.

On 28x28 it is the textbook network (no padding, 320 features into fc1). Inputs
smaller than 28 (sklearn's 8x8 digits) get padding 2 on both convolutions so
the spatial size survives two 5x5 convolutions and two 2x2 poolings.
"""

from __future__ import annotations

from typing import Any

from models.base import ModelDef, Shape

C1, C2, FC, K = 10, 20, 50, 5


def _geometry(input_shape: Shape) -> tuple[int, int]:
    """(padding, flattened features after the conv stack) for this input."""
    _, h, w = input_shape
    pad = 0 if min(h, w) >= 28 else 2

    def after(n: int) -> int:
        n = (n + 2 * pad - K + 1) // 2  # conv then 2x2 pool
        return (n + 2 * pad - K + 1) // 2

    return pad, C2 * after(h) * after(w)


def check_input(input_shape: Shape) -> None:
    if len(input_shape) != 3 or input_shape[0] != 1:
        raise ValueError(f"lenet needs 1-channel images [1, H, W], got input shape {input_shape}")
    if min(input_shape[1:]) < 8:
        raise ValueError(f"lenet needs images of at least 8x8, got {input_shape[1:]}")


def param_shapes(input_shape: Shape, classes: int) -> dict[str, tuple[Shape, int]]:
    _, flat = _geometry(input_shape)
    return {
        "conv1.weight": ((C1, 1, K, K), K * K),
        "conv1.bias": ((C1,), K * K),
        "conv2.weight": ((C2, C1, K, K), C1 * K * K),
        "conv2.bias": ((C2,), C1 * K * K),
        "fc1.weight": ((FC, flat), flat),
        "fc1.bias": ((FC,), flat),
        "fc2.weight": ((classes, FC), FC),
        "fc2.bias": ((classes,), FC),
    }


def build_torch(input_shape: Shape, classes: int, **_: Any) -> Any:
    import torch
    from torch import nn
    from torch.nn import functional as F

    pad, flat = _geometry(input_shape)

    class LeNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(1, C1, K, padding=pad)
            self.conv2 = nn.Conv2d(C1, C2, K, padding=pad)
            self.fc1 = nn.Linear(flat, FC)
            self.fc2 = nn.Linear(FC, classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = F.relu(F.max_pool2d(self.conv1(x), 2))
            x = F.relu(F.max_pool2d(self.conv2(x), 2))
            x = F.relu(self.fc1(torch.flatten(x, 1)))
            return self.fc2(x)

    return LeNet()


def build_paddle(input_shape: Shape, classes: int, **_: Any) -> Any:
    import paddle
    from paddle import nn
    from paddle.nn import functional as F

    pad, flat = _geometry(input_shape)

    class LeNet(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2D(1, C1, K, padding=pad)
            self.conv2 = nn.Conv2D(C1, C2, K, padding=pad)
            self.fc1 = nn.Linear(flat, FC)
            self.fc2 = nn.Linear(FC, classes)

        def forward(self, x: Any) -> Any:
            x = F.relu(F.max_pool2d(self.conv1(x), 2))
            x = F.relu(F.max_pool2d(self.conv2(x), 2))
            x = F.relu(self.fc1(paddle.flatten(x, 1)))
            return self.fc2(x)

    return LeNet()


def flops(input_shape: Shape, classes: int) -> int:
    _, h, w = input_shape
    pad, flat = _geometry(input_shape)
    h1, w1 = h + 2 * pad - K + 1, w + 2 * pad - K + 1
    h2, w2 = h1 // 2 + 2 * pad - K + 1, w1 // 2 + 2 * pad - K + 1
    return 2 * (C1 * K * K * h1 * w1 + C2 * C1 * K * K * h2 * w2 + flat * FC + FC * classes)


MODEL = ModelDef(
    name="lenet",
    description="LeNet-5 style CNN (conv10-conv20-fc50) for 1-channel images",
    default_dataset="digits",
    default_batch=32,
    synthetic_shape=(1, 28, 28),
    param_shapes=param_shapes,
    torch=build_torch,
    paddle=build_paddle,
    check_input=check_input,
    flops=flops,
)
