"""PyTorch DDP's documented recipe (torchrun, gloo on CPU), timed in windows. Launch with torchrun."""

import common

args = common.parse()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from torch_lenet import LeNet  # noqa: E402

dist.init_process_group("gloo")
torch.set_num_threads(args.threads)
rank, world = dist.get_rank(), dist.get_world_size()
data = common.batches(args.data, rank, world, args.batch_size, args.warmup_steps + args.steps)
data = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in data]
model = DDP(LeNet())
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * world, momentum=0.9)


def step(i: int) -> None:
    x, y = data[i]
    optimizer.zero_grad()
    F.cross_entropy(model(x), y).backward()
    optimizer.step()


times = torch.tensor(common.run_windows(step, args, lambda: None), dtype=torch.float64)
dist.all_reduce(times, op=dist.ReduceOp.MAX)
common.report(rank, times.tolist(), common.window_sizes(args), args.batch_size * world)
dist.destroy_process_group()
