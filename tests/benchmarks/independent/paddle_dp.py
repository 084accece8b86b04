"""Paddle's documented DataParallel recipe, timed in windows. Launch with paddle.distributed.launch.

`make_step` is also imported by the interleaved benchmark, which calls it inside a
process whose parallel environment is already up (the recipe's own step, nothing else).
"""

import os
from collections.abc import Callable
from typing import Any


def make_step(data: list[tuple[Any, Any]], lr: float, world: int) -> Callable[[int], None]:
    """The recipe's model, optimizer and step on numpy batches (init_parallel_env done)."""
    import paddle
    import paddle.nn.functional as F
    from paddle import nn

    class LeNet(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2D(1, 10, kernel_size=5)
            self.conv2 = nn.Conv2D(10, 20, kernel_size=5)
            self.fc1 = nn.Linear(320, 50)
            self.fc2 = nn.Linear(50, 10)

        def forward(self, x: Any) -> Any:
            x = F.relu(F.max_pool2d(self.conv1(x), 2))
            x = F.relu(F.max_pool2d(self.conv2(x), 2))
            x = F.relu(self.fc1(paddle.flatten(x, 1)))
            return self.fc2(x)

    tensors = [(paddle.to_tensor(x), paddle.to_tensor(y)) for x, y in data]
    model = paddle.DataParallel(LeNet()) if world > 1 else LeNet()
    optimizer = paddle.optimizer.Momentum(
        learning_rate=lr * world, momentum=0.9, parameters=model.parameters()
    )

    def step(i: int) -> None:
        x, y = tensors[i % len(tensors)]
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.clear_grad()

    return step


def main() -> None:
    import common

    args = common.parse()

    import paddle
    import paddle.distributed as dist

    paddle.set_device("cpu")
    world = int(os.environ.get("PADDLE_TRAINERS_NUM", "1"))
    if world > 1:
        dist.init_parallel_env()
    rank = dist.get_rank()
    data = common.batches(args.data, rank, world, args.batch_size, args.warmup_steps + args.steps)
    step = make_step(data, args.lr, world)
    times = paddle.to_tensor(common.run_windows(step, args, lambda: None), dtype="float64")
    if world > 1:
        dist.all_reduce(times, op=dist.ReduceOp.MAX)
    common.report(rank, times.numpy().tolist(), common.window_sizes(args), args.batch_size * world)


if __name__ == "__main__":
    main()
