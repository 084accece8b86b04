"""Paddle's documented DataParallel recipe, timed in windows. Launch with paddle.distributed.launch."""

from typing import Any

import common

args = common.parse()

import paddle  # noqa: E402
import paddle.distributed as dist  # noqa: E402
import paddle.nn.functional as F  # noqa: E402
from paddle import nn  # noqa: E402


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


paddle.set_device("cpu")
world = int(__import__("os").environ.get("PADDLE_TRAINERS_NUM", "1"))
if world > 1:
    dist.init_parallel_env()
rank = dist.get_rank()
data = common.batches(args.data, rank, world, args.batch_size, args.warmup_steps + args.steps)
data = [(paddle.to_tensor(x), paddle.to_tensor(y)) for x, y in data]
model = paddle.DataParallel(LeNet()) if world > 1 else LeNet()
optimizer = paddle.optimizer.Momentum(
    learning_rate=args.lr * world, momentum=0.9, parameters=model.parameters()
)


def step(i: int) -> None:
    x, y = data[i]
    F.cross_entropy(model(x), y).backward()
    optimizer.step()
    optimizer.clear_grad()


times = paddle.to_tensor(common.run_windows(step, args, lambda: None), dtype="float64")
if world > 1:
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
common.report(rank, times.numpy().tolist(), common.window_sizes(args), args.batch_size * world)
