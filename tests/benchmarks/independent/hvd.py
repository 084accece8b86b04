"""Horovod's documented PyTorch recipe, timed in windows. Launch with horovodrun.

`make_step` is also imported by the interleaved benchmark, which calls it inside a
process where hvd.init() already ran (the recipe's own step, nothing else).
"""

from collections.abc import Callable
from typing import Any


def make_step(data: list[tuple[Any, Any]], lr: float, world: int) -> Callable[[int], None]:
    """The recipe's model, broadcasts, optimizer and step on numpy batches (after hvd.init)."""
    import horovod.torch as hvd
    import torch
    import torch.nn.functional as F
    from torch_lenet import LeNet

    tensors = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in data]
    model = LeNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr * world, momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    def step(i: int) -> None:
        x, y = tensors[i % len(tensors)]
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()

    return step


def main() -> None:
    import common

    args = common.parse()

    import horovod.torch as hvd
    import torch

    hvd.init()
    torch.set_num_threads(args.threads)
    rank, world = hvd.rank(), hvd.size()
    data = common.batches(args.data, rank, world, args.batch_size, args.warmup_steps + args.steps)
    step = make_step(data, args.lr, world)
    times = torch.tensor(common.run_windows(step, args, lambda: None), dtype=torch.float64)
    times = hvd.allreduce(times, op=hvd.Max)
    common.report(rank, times.tolist(), common.window_sizes(args), args.batch_size * world)
    hvd.shutdown()


if __name__ == "__main__":
    main()
