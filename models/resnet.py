"""ResNet-18 (CIFAR style, 3x3 stem, 32x32) and ResNet-50 (ImageNet style, 7x7 stem, 224x224).

One layer table drives the parameter shapes, the analytic FLOP count and both
framework builders, so the three cannot disagree. BatchNorm follows the spec:
`bn_momentum` in torch's convention (paddle's is 1 - m) and `bn_eps`; the
running statistics are buffers in the canonical weights under torch's names
(`running_mean`, `running_var`); torch's `num_batches_tracked` counter is not
part of them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from models.base import ModelDef, Shape


@dataclasses.dataclass(frozen=True)
class Conv:
    name: str
    cin: int
    cout: int
    k: int
    stride: int


@dataclasses.dataclass(frozen=True)
class Block:
    prefix: str
    convs: tuple[Conv, ...]  # each followed by BatchNorm "<conv name with conv->bn>"
    shortcut: Conv | None  # projection (conv + bn) when shape changes


def _bn(conv_name: str) -> str:
    return conv_name.replace("conv", "bn") if "conv" in conv_name else conv_name + "_bn"


def _layers(depth: int) -> tuple[Conv, list[Block], int]:
    """(stem conv, blocks, features into fc) for ResNet-18 (CIFAR) or ResNet-50."""
    if depth == 18:
        stem = Conv("conv1", 3, 64, 3, 1)
        widths, counts, expansion, bottleneck = (64, 128, 256, 512), (2, 2, 2, 2), 1, False
    else:
        stem = Conv("conv1", 3, 64, 7, 2)
        widths, counts, expansion, bottleneck = (64, 128, 256, 512), (3, 4, 6, 3), 4, True
    blocks, cin = [], 64
    for stage, (width, count) in enumerate(zip(widths, counts, strict=True), start=1):
        for i in range(count):
            stride = 2 if stage > 1 and i == 0 else 1
            p = f"layer{stage}.{i}."
            cout = width * expansion
            if bottleneck:
                convs: tuple[Conv, ...] = (
                    Conv(p + "conv1", cin, width, 1, 1),
                    Conv(p + "conv2", width, width, 3, stride),
                    Conv(p + "conv3", width, cout, 1, 1),
                )
            else:
                convs = (
                    Conv(p + "conv1", cin, width, 3, stride),
                    Conv(p + "conv2", width, width, 3, 1),
                )
            short = (
                Conv(p + "downsample.0", cin, cout, 1, stride)
                if stride != 1 or cin != cout
                else None
            )
            blocks.append(Block(p, convs, short))
            cin = cout
    return stem, blocks, cin


def _short_bn(conv: Conv) -> str:
    return conv.name[: -len("0")] + "1"  # downsample.0 (conv) -> downsample.1 (bn)


def _all_convs(depth: int) -> list[tuple[Conv, str]]:
    stem, blocks, _ = _layers(depth)
    out = [(stem, "bn1")]
    for b in blocks:
        out += [(c, _bn(c.name)) for c in b.convs]
        if b.shortcut:
            out.append((b.shortcut, _short_bn(b.shortcut)))
    return out


def _check(depth: int) -> Any:
    def check(input_shape: Shape) -> None:
        if len(input_shape) != 3 or input_shape[0] != 3:
            raise ValueError(f"resnet{depth} needs 3-channel images [3, H, W], got {input_shape}")
        if min(input_shape[1:]) < 8:
            raise ValueError(f"resnet{depth} needs images of at least 8x8, got {input_shape[1:]}")

    return check


def _param_shapes(depth: int) -> Any:
    def shapes(input_shape: Shape, classes: int) -> dict[str, tuple[Shape, int]]:
        _, _, feats = _layers(depth)
        out: dict[str, tuple[Shape, int]] = {}
        for conv, _bn_name in _all_convs(depth):
            out[conv.name + ".weight"] = (
                (conv.cout, conv.cin, conv.k, conv.k),
                conv.cin * conv.k * conv.k,
            )
        out["fc.weight"] = ((classes, feats), feats)
        out["fc.bias"] = ((classes,), feats)
        return out

    return shapes


def _constants(depth: int) -> Any:
    def constants(input_shape: Shape, classes: int) -> dict[str, tuple[Shape, float]]:
        out: dict[str, tuple[Shape, float]] = {}
        for conv, bn in _all_convs(depth):
            for suffix, value in (
                ("weight", 1.0),
                ("bias", 0.0),
                ("running_mean", 0.0),
                ("running_var", 1.0),
            ):
                out[f"{bn}.{suffix}"] = ((conv.cout,), value)
        return out

    return constants


def _flops(depth: int) -> Any:
    def flops(input_shape: Shape, classes: int) -> int:
        """Forward multiply-adds x 2 of the convolutions and the classifier, per sample."""
        h, w = input_shape[1], input_shape[2]

        def out_size(n: int, c: Conv) -> int:
            return (n + 2 * (c.k // 2) - c.k) // c.stride + 1

        stem, blocks, feats = _layers(depth)
        total = 0
        h, w = out_size(h, stem), out_size(w, stem)
        total += 2 * stem.cin * stem.cout * stem.k**2 * h * w
        if depth != 18:  # max-pool 3x3 stride 2
            h, w = (h + 2 - 3) // 2 + 1, (w + 2 - 3) // 2 + 1
        for b in blocks:
            bh, bw = h, w
            for c in b.convs:
                bh, bw = out_size(bh, c), out_size(bw, c)
                total += 2 * c.cin * c.cout * c.k**2 * bh * bw
            if b.shortcut:
                total += 2 * b.shortcut.cin * b.shortcut.cout * bh * bw
            h, w = bh, bw
        return total + 2 * feats * classes

    return flops


def _build_torch(depth: int) -> Any:
    def build(
        input_shape: Shape, classes: int, bn_momentum: float = 0.1, bn_eps: float = 1e-5
    ) -> Any:
        import torch
        from torch import nn

        stem, blocks, feats = _layers(depth)

        def conv(c: Conv) -> nn.Conv2d:
            return nn.Conv2d(c.cin, c.cout, c.k, c.stride, c.k // 2, bias=False)

        def bn(n: int) -> nn.BatchNorm2d:
            return nn.BatchNorm2d(n, eps=bn_eps, momentum=bn_momentum)

        class TorchBlock(nn.Module):
            def __init__(self, b: Block) -> None:
                super().__init__()
                for c in b.convs:
                    local = c.name[len(b.prefix) :]
                    setattr(self, local, conv(c))
                    setattr(self, _bn(local), bn(c.cout))
                self.names = [c.name[len(b.prefix) :] for c in b.convs]
                self.downsample = (
                    nn.Sequential(conv(b.shortcut), bn(b.shortcut.cout)) if b.shortcut else None
                )

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                out = x
                for i, n in enumerate(self.names):
                    out = getattr(self, _bn(n))(getattr(self, n)(out))
                    if i < len(self.names) - 1:
                        out = torch.relu(out)
                return torch.relu(out + (self.downsample(x) if self.downsample is not None else x))

        class ResNet(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.conv1, self.bn1 = conv(stem), bn(stem.cout)
                stages: dict[str, list[nn.Module]] = {}
                for b in blocks:
                    stages.setdefault(b.prefix.split(".")[0], []).append(TorchBlock(b))
                for name, mods in stages.items():
                    setattr(self, name, nn.Sequential(*mods))
                self.stage_names = list(stages)
                self.fc = nn.Linear(feats, classes)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                x = torch.relu(self.bn1(self.conv1(x)))
                if depth != 18:
                    x = nn.functional.max_pool2d(x, 3, 2, 1)
                for name in self.stage_names:
                    x = getattr(self, name)(x)
                return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

        return ResNet()

    return build


def _paddle_parts(bn_momentum: float, bn_eps: float) -> tuple[Any, Any]:
    """Paddle's convolution (no bias, "same" padding) and BatchNorm makers."""
    from paddle import nn

    def conv(c: Conv) -> Any:
        return nn.Conv2D(c.cin, c.cout, c.k, c.stride, c.k // 2, bias_attr=False)

    def bn(n: int) -> Any:
        # paddle keeps momentum x old + (1 - momentum) x new: the complement of torch's
        return nn.BatchNorm2D(n, momentum=1.0 - bn_momentum, epsilon=bn_eps)

    return conv, bn


def _build_paddle(depth: int) -> Any:
    def build(
        input_shape: Shape, classes: int, bn_momentum: float = 0.1, bn_eps: float = 1e-5
    ) -> Any:
        import paddle
        from paddle import nn

        stem, blocks, feats = _layers(depth)
        conv, bn = _paddle_parts(bn_momentum, bn_eps)

        class PaddleBlock(nn.Layer):
            def __init__(self, b: Block) -> None:
                super().__init__()
                for c in b.convs:
                    local = c.name[len(b.prefix) :]
                    setattr(self, local, conv(c))
                    setattr(self, _bn(local), bn(c.cout))
                self.names = [c.name[len(b.prefix) :] for c in b.convs]
                self.downsample = (
                    nn.Sequential(conv(b.shortcut), bn(b.shortcut.cout)) if b.shortcut else None
                )

            def forward(self, x: Any) -> Any:
                out = x
                for i, n in enumerate(self.names):
                    out = getattr(self, _bn(n))(getattr(self, n)(out))
                    if i < len(self.names) - 1:
                        out = nn.functional.relu(out)
                return nn.functional.relu(
                    out + (self.downsample(x) if self.downsample is not None else x)
                )

        class ResNet(nn.Layer):
            def __init__(self) -> None:
                super().__init__()
                self.conv1, self.bn1 = conv(stem), bn(stem.cout)
                stages: dict[str, list[Any]] = {}
                for b in blocks:
                    stages.setdefault(b.prefix.split(".")[0], []).append(PaddleBlock(b))
                for name, mods in stages.items():
                    setattr(self, name, nn.Sequential(*mods))
                self.stage_names = list(stages)
                self.fc = nn.Linear(feats, classes)

            def forward(self, x: Any) -> Any:
                x = nn.functional.relu(self.bn1(self.conv1(x)))
                if depth != 18:
                    x = nn.functional.max_pool2d(x, 3, 2, 1)
                for name in self.stage_names:
                    x = getattr(self, name)(x)
                return self.fc(paddle.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

        return ResNet()

    return build


def _model(depth: int, shape: Shape, description: str, batch: int) -> ModelDef:
    return ModelDef(
        name=f"resnet{depth}",
        description=description,
        default_dataset="synthetic",
        default_batch=batch,
        synthetic_shape=shape,
        param_shapes=_param_shapes(depth),
        torch=_build_torch(depth),
        paddle=_build_paddle(depth),
        check_input=_check(depth),
        constants=_constants(depth),
        flops=_flops(depth),
    )


RESNET18 = _model(18, (3, 32, 32), "ResNet-18, CIFAR style (3x3 stem), BatchNorm", 32)
RESNET50 = _model(50, (3, 224, 224), "ResNet-50, ImageNet style (7x7 stem), BatchNorm", 32)
