"""The canonical DDP loop (PyTorch's DDP tutorial), timed. Launch with torchrun."""

import time

import common
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import models

args = common.parse()
torch.set_num_threads(args.threads)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
xs, ys, ds = common.batches(rank, world, args.batch_size, args.warmup_steps + args.steps)
xs = [torch.from_numpy(x) for x in xs]
ys = [torch.from_numpy(y) for y in ys]
spec = models.get(args.model)
model = DDP(spec.torch(ds.input_shape, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * world, momentum=0.9)

for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
    if i == args.warmup_steps:
        dist.barrier()
        start = time.perf_counter()
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
common.report(rank, args.steps * args.batch_size * world, float(elapsed))
dist.destroy_process_group()
