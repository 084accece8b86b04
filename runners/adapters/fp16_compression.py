"""The fp16 gradient allreduce of both torch engines, in one order of operations: DDP
runs it as its `fp16_compress_hook`, Horovod through `PrescaledFP16`; both record it as
`FP16_COMPRESSION`."""

from __future__ import annotations

import torch

# Recorded for every engine that compresses: the order of operations of the fp16 allreduce.
FP16_COMPRESSION = "cast to fp16, divide by world size, sum in fp16, cast back"


class PrescaledFP16:
    """Horovod compressor doing exactly what DDP's fp16_compress_hook does.

    Cast to fp16, divide by the world size in fp16, then (with op=Sum) sum in fp16 and
    cast back. Horovod's own Compression.fp16 with op=Average sums first and divides
    afterwards, so under loss scaling its sum overflows where DDP's does not.
    """

    def __init__(self, size: int) -> None:
        self.size = size

    def compress(self, tensor: torch.Tensor) -> tuple[torch.Tensor, torch.dtype | None]:
        if not tensor.dtype.is_floating_point:
            return tensor, None
        return tensor.to(torch.float16).div_(self.size), tensor.dtype

    def decompress(self, tensor: torch.Tensor, ctx: torch.dtype | None) -> torch.Tensor:
        return tensor if ctx is None else tensor.to(ctx)
