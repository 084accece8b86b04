"""The canonical Paddle DataParallel loop (Paddle's dygraph distributed guide), timed.

Launch with python -m paddle.distributed.launch.
"""

import time

import common
import paddle
import paddle.distributed as dist
import paddle.nn.functional as F

import models

args = common.parse()
paddle.set_device("cpu")
world = int(__import__("os").environ.get("PADDLE_TRAINERS_NUM", "1"))
if world > 1:
    dist.init_parallel_env()
rank = dist.get_rank()
xs, ys, ds = common.batches(rank, world, args.batch_size, args.warmup_steps + args.steps)
xs = [paddle.to_tensor(x) for x in xs]
ys = [paddle.to_tensor(y) for y in ys]
model = models.get(args.model).paddle(ds.input_shape, 10)
if world > 1:
    model = paddle.DataParallel(model)
optimizer = paddle.optimizer.Momentum(
    learning_rate=args.lr * world, momentum=0.9, parameters=model.parameters()
)

for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
    if i == args.warmup_steps:
        if world > 1:
            dist.barrier()
        start = time.perf_counter()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.clear_grad()
elapsed = paddle.to_tensor([time.perf_counter() - start], dtype="float64")
if world > 1:
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
common.report(rank, args.steps * args.batch_size * world, float(elapsed.numpy()[0]))
