"""A small decoder-only Transformer language model (GPT-style, pre-LayerNorm).

Next-token prediction over sequences of token ids: token and learned position
embeddings, LAYERS blocks of causal multi-head self-attention and a GELU MLP, a
final LayerNorm and an untied output head. Attention is written out (scores,
mask, softmax, weighted sum) in both frameworks rather than calling a fused
kernel, so torch and paddle compute the same thing in the same order.
"""

from __future__ import annotations

import math
from typing import Any

from models.base import ModelDef, Shape

WIDTH, HEADS, LAYERS, MLP_RATIO = 64, 4, 2, 4
LN_EPS = 1e-5


def param_shapes(input_shape: Shape, vocab: int) -> dict[str, tuple[Shape, int]]:
    (seq,) = input_shape
    d, hidden = WIDTH, WIDTH * MLP_RATIO
    shapes: dict[str, tuple[Shape, int]] = {
        "tok.weight": ((vocab, d), d),
        "pos.weight": ((seq, d), d),
        "head.weight": ((vocab, d), d),
        "head.bias": ((vocab,), d),
    }
    for i in range(LAYERS):
        p = f"blocks.{i}."
        shapes[p + "qkv.weight"] = ((3 * d, d), d)
        shapes[p + "qkv.bias"] = ((3 * d,), d)
        shapes[p + "proj.weight"] = ((d, d), d)
        shapes[p + "proj.bias"] = ((d,), d)
        shapes[p + "fc1.weight"] = ((hidden, d), d)
        shapes[p + "fc1.bias"] = ((hidden,), d)
        shapes[p + "fc2.weight"] = ((d, hidden), hidden)
        shapes[p + "fc2.bias"] = ((d,), hidden)
    return shapes


def constants(input_shape: Shape, vocab: int) -> dict[str, tuple[Shape, float]]:
    """LayerNorm scales start at 1 and shifts at 0, as in both frameworks."""
    names = [f"blocks.{i}.{ln}" for i in range(LAYERS) for ln in ("ln1", "ln2")] + ["ln_f"]
    out: dict[str, tuple[Shape, float]] = {}
    for name in names:
        out[name + ".weight"] = ((WIDTH,), 1.0)
        out[name + ".bias"] = ((WIDTH,), 0.0)
    return out


def build_torch(input_shape: Shape, vocab: int, **_: Any) -> Any:
    import torch
    from torch import nn

    (seq,) = input_shape
    d, hd = WIDTH, WIDTH // HEADS

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1 = nn.LayerNorm(d, eps=LN_EPS)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ln2 = nn.LayerNorm(d, eps=LN_EPS)
            self.fc1 = nn.Linear(d, MLP_RATIO * d)
            self.fc2 = nn.Linear(MLP_RATIO * d, d)

        def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
            q, k, v = (z.reshape(b, t, HEADS, hd).transpose(1, 2) for z in (q, k, v))
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd)) + mask[:t, :t]
            att = torch.softmax(scores, dim=-1) @ v
            x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
            return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))

    class DecoderLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(seq, d)
            self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
            self.ln_f = nn.LayerNorm(d, eps=LN_EPS)
            self.head = nn.Linear(d, vocab)
            # additive causal mask; not a parameter and not part of the shared state
            mask = torch.full((seq, seq), float("-inf")).triu(1)
            self.register_buffer("mask", mask, persistent=False)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            t = ids.shape[1]
            x = self.tok(ids) + self.pos(torch.arange(t, device=ids.device))
            for block in self.blocks:
                x = block(x, self.mask)
            return self.head(self.ln_f(x))  # [batch, seq, vocab]

    return DecoderLM()


def build_paddle(input_shape: Shape, vocab: int, **_: Any) -> Any:
    import paddle
    from paddle import nn

    (seq,) = input_shape
    d, hd = WIDTH, WIDTH // HEADS

    class Block(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.ln1 = nn.LayerNorm(d, epsilon=LN_EPS)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ln2 = nn.LayerNorm(d, epsilon=LN_EPS)
            self.fc1 = nn.Linear(d, MLP_RATIO * d)
            self.fc2 = nn.Linear(MLP_RATIO * d, d)

        def forward(self, x: Any, mask: Any) -> Any:
            b, t = x.shape[0], x.shape[1]
            q, k, v = paddle.split(self.qkv(self.ln1(x)), 3, axis=-1)
            q, k, v = (z.reshape([b, t, HEADS, hd]).transpose([0, 2, 1, 3]) for z in (q, k, v))
            scores = (q @ k.transpose([0, 1, 3, 2])) * (1.0 / math.sqrt(hd)) + mask[:t, :t]
            att = nn.functional.softmax(scores, axis=-1) @ v
            x = x + self.proj(att.transpose([0, 2, 1, 3]).reshape([b, t, d]))
            return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))

    class DecoderLM(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(seq, d)
            self.blocks = nn.LayerList([Block() for _ in range(LAYERS)])
            self.ln_f = nn.LayerNorm(d, epsilon=LN_EPS)
            self.head = nn.Linear(d, vocab)
            mask = paddle.triu(paddle.full([seq, seq], float("-inf")), 1)
            self.register_buffer("mask", mask, persistable=False)

        def forward(self, ids: Any) -> Any:
            t = ids.shape[1]
            x = self.tok(ids) + self.pos(paddle.arange(t))
            for block in self.blocks:
                x = block(x, self.mask)
            return self.head(self.ln_f(x))

    return DecoderLM()


def check_input(input_shape: Shape) -> None:
    if len(input_shape) != 1 or input_shape[0] < 2:
        raise ValueError(
            f"transformer takes token sequences [seq >= 2], got input shape {input_shape}"
        )


def flops(input_shape: Shape, vocab: int) -> int:
    """Forward FLOPs per sequence: the matrix products (2 per multiply-add)."""
    (t,) = input_shape
    d = WIDTH
    per_layer = 2 * t * d * 3 * d + 2 * t * d * d + 2 * 2 * t * d * MLP_RATIO * d
    attention = 2 * 2 * t * t * d  # scores and weighted sum, all heads
    return LAYERS * (per_layer + attention) + 2 * t * d * vocab


MODEL = ModelDef(
    name="transformer",
    description=f"decoder-only LM, {LAYERS} layers, width {WIDTH}, {HEADS} heads",
    default_dataset="sonnets",
    default_batch=16,
    synthetic_shape=(64,),
    param_shapes=param_shapes,
    torch=build_torch,
    paddle=build_paddle,
    check_input=check_input,
    constants=constants,
    flops=flops,
    tokens=True,
)
