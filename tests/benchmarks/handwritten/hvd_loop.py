"""The canonical Horovod PyTorch loop (Horovod's docs and examples), timed. Launch with horovodrun."""

import time

import common
import horovod.torch as hvd
import torch
import torch.nn.functional as F

import models

args = common.parse()
hvd.init()
torch.set_num_threads(args.threads)
rank, world = hvd.rank(), hvd.size()
xs, ys, ds = common.batches(rank, world, args.batch_size, args.warmup_steps + args.steps)
xs = [torch.from_numpy(x) for x in xs]
ys = [torch.from_numpy(y) for y in ys]
model = models.get(args.model).torch(ds.input_shape, 10)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * world, momentum=0.9)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
    if i == args.warmup_steps:
        hvd.barrier()
        start = time.perf_counter()
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
elapsed = hvd.allreduce(
    torch.tensor([time.perf_counter() - start], dtype=torch.float64), op=hvd.Max
)
common.report(rank, args.steps * args.batch_size * world, float(elapsed))
hvd.shutdown()
