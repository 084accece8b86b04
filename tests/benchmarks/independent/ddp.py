"""PyTorch DDP's documented recipe (torchrun, gloo on CPU), timed in windows. Launch with torchrun.

`make_step` is also imported by the interleaved benchmark, which calls it inside a
process whose process group is already up (the recipe's own step, nothing else).
"""

from collections.abc import Callable
from typing import Any


def make_step(data: list[tuple[Any, Any]], lr: float, world: int) -> Callable[[int], None]:
    """The recipe's model, optimizer and step on numpy batches (the process group is up)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch_lenet import LeNet

    tensors = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in data]
    model = DDP(LeNet())
    optimizer = torch.optim.SGD(model.parameters(), lr=lr * world, momentum=0.9)

    def step(i: int) -> None:
        x, y = tensors[i % len(tensors)]
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()

    return step


def main() -> None:
    import common

    args = common.parse()

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    torch.set_num_threads(args.threads)
    rank, world = dist.get_rank(), dist.get_world_size()
    data = common.batches(args.data, rank, world, args.batch_size, args.warmup_steps + args.steps)
    step = make_step(data, args.lr, world)
    times = torch.tensor(common.run_windows(step, args, lambda: None), dtype=torch.float64)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    common.report(rank, times.tolist(), common.window_sizes(args), args.batch_size * world)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
