"""Horovod's documented PyTorch recipe, timed in windows. Launch with horovodrun."""

import common

args = common.parse()

import horovod.torch as hvd  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch_lenet import LeNet  # noqa: E402

hvd.init()
torch.set_num_threads(args.threads)
rank, world = hvd.rank(), hvd.size()
data = common.batches(args.data, rank, world, args.batch_size, args.warmup_steps + args.steps)
data = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in data]
model = LeNet()
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * world, momentum=0.9)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())


def step(i: int) -> None:
    x, y = data[i]
    optimizer.zero_grad()
    F.cross_entropy(model(x), y).backward()
    optimizer.step()


times = torch.tensor(common.run_windows(step, args, lambda: None), dtype=torch.float64)
times = hvd.allreduce(times, op=hvd.Max)
common.report(rank, times.tolist(), common.window_sizes(args), args.batch_size * world)
hvd.shutdown()
