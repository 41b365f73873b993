"""PyTorch DDP baseline for tools/bench/cluster: a model of configs/ (--model mlp: the MLP of
fashion-mnist-mlp.yaml; lenet: fashion-mnist-lenet.yaml's CNN; wide: the MLP with two layers of
2048 units, 5.8M parameters, where bytes matter) trained synchronously by one process per
namespaced host (gloo backend), batch 64 per worker, the spec's optimizer (Nesterov with its
learning rate, momentum, L2 and per-minibatch decay), each host taking its slice of a shared
per-epoch permutation, as dtrain does.

Run with Debian's /usr/bin/python3 (python3-torch on OpenBLAS), once per host, with RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT set. Rank 0 evaluates after every epoch and prints
"epoch E seconds T accuracy A" (T: training time so far, evaluation excluded); training stops
once the accuracy reaches --target or after --epochs. Every rank prints "steps S" at the end,
rank 0 also "compute_share C": the share of the training time spent computing steps (forward,
backward, optimizer). For DiLoCo that is timed directly (its inner steps do not communicate);
for DDP, whose backward carries the all-reduce, it is the steps taken times one step's compute
timed beforehand on a copy of the model without DDP (the median of 20).

--local-steps H > 0 runs DiLoCo (Douillard et al. 2023) instead of DDP: each rank takes H
steps of the same inner optimizer on its own replica, then the ranks average the
pseudo-gradient (global - local parameters) in one all-reduce, and every rank applies the same
outer Nesterov step (--outer-lr, --outer-momentum; 1 and 0 are plain local SGD) to the global
parameters, which become every replica's. Rank 0 evaluates the global parameters.

--powersgd-rank R > 0 runs DDP with PyTorch's PowerSGD communication hook (Vogels et al. 2019:
each gradient matrix sent as a rank-R product, with error feedback), dense all-reduce for the
first --powersgd-start steps. --lr replaces the spec's learning rate (a shared grid).
"""
import argparse
import copy
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from blas_check import require_openblas  # noqa: E402
from train_torch import DATA, read_idx  # noqa: E402  (the same IDX reader as the 1-node bench)


# The specs' optimizers: learning rate, momentum, L2, decay per minibatch of the job.
HYPER = {"mlp": (0.05, 0.8, 1e-4, 0.9997), "wide": (0.05, 0.8, 1e-4, 0.9997),
         "lenet": (0.04, 0.9, 5e-4, 0.9993)}


def load(split, model):
    x = read_idx(DATA + f"{split}-images-idx3-ubyte.gz").astype(np.float32) / 255.0
    y = read_idx(DATA + f"{split}-labels-idx1-ubyte.gz").astype(np.int64)
    shape = (len(x), 1, 28, 28) if model == "lenet" else (len(x), -1)
    return torch.from_numpy(x.reshape(shape)), torch.from_numpy(y)


def build(model):
    """The spec's layers (configs/fashion-mnist-{mlp,lenet}.yaml); LeNet with the spec's Xavier
    init, the MLPs with PyTorch's default (as this baseline always had)."""
    if model == "lenet":
        # convolution 5x5x20 and 5x5x50 with identity activation, 2x2 max pooling, dense 500.
        net = nn.Sequential(nn.Conv2d(1, 20, 5), nn.MaxPool2d(2), nn.Conv2d(20, 50, 5),
                            nn.MaxPool2d(2), nn.Flatten(), nn.Linear(800, 500), nn.ReLU(),
                            nn.Linear(500, 10))
        for m in net:
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
        return net
    hidden = (2048, 2048) if model == "wide" else (256, 128)
    return nn.Sequential(nn.Linear(784, hidden[0]), nn.ReLU(), nn.Linear(hidden[0], hidden[1]),
                         nn.ReLU(), nn.Linear(hidden[1], 10))


def step_compute_seconds(model, x, y, batch, lr, momentum, l2):
    """One step's forward, backward and optimizer on a copy of the model without DDP: the
    median of 20 (after 5 to warm up)."""
    copy_ = copy.deepcopy(model)
    opt = torch.optim.SGD(copy_.parameters(), lr=lr, momentum=momentum, nesterov=True,
                          weight_decay=l2)
    loss_fn = nn.CrossEntropyLoss()
    times = []
    for i in range(25):
        idx = torch.arange(i * batch, (i + 1) * batch)
        start = time.perf_counter()
        opt.zero_grad()
        loss_fn(copy_(x[idx]), y[idx]).backward()
        opt.step()
        times.append(time.perf_counter() - start)
    return sorted(times[5:])[len(times[5:]) // 2]


def load_flat(params, flat):
    """Copies the flat vector `flat` into the tensors `params`, in order."""
    offset = 0
    with torch.no_grad():
        for p in params:
            p.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()


class Outer:
    """DiLoCo's outer step over a model's parameters, flattened into one vector so that a round
    is one all-reduce."""

    def __init__(self, model, lr, momentum):
        self.model, self.lr, self.momentum = model, lr, momentum
        self.params = list(model.parameters())
        self.global_params = self._flat().clone()
        self.velocity = torch.zeros_like(self.global_params)

    def _flat(self):
        return torch.cat([p.detach().reshape(-1) for p in self.params])

    def _load(self, flat):
        load_flat(self.params, flat)

    def round(self, world):
        delta = self.global_params - self._flat()  # this rank's pseudo-gradient
        dist.all_reduce(delta)
        delta /= world
        # PyTorch's SGD with nesterov=True, applied to the averaged pseudo-gradient.
        self.velocity.mul_(self.momentum).add_(delta)
        self.global_params -= self.lr * (delta + self.momentum * self.velocity)
        self._load(self.global_params)

    def global_model(self):
        """A copy of the model holding the global parameters (what the job would keep)."""
        evaluated = copy.deepcopy(self.model)
        load_flat(list(evaluated.parameters()), self.global_params)
        return evaluated


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--target", type=float, default=0.87)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--local-steps", type=int, default=0)
    p.add_argument("--outer-lr", type=float, default=0.7)
    p.add_argument("--outer-momentum", type=float, default=0.9)
    p.add_argument("--powersgd-rank", type=int, default=0)
    p.add_argument("--powersgd-start", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.0, help="0: the spec's")
    p.add_argument("--model", choices=sorted(HYPER), default="mlp")
    args = p.parse_args()
    spec_lr, momentum, l2, gamma = HYPER[args.model]
    lr = args.lr or spec_lr
    require_openblas()
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(12345)
    x, y = load("train", args.model)
    tx, ty = load("t10k", args.model)
    model = build(args.model)
    one_step = step_compute_seconds(model, x, y, args.batch, lr, momentum, l2)
    diloco = Outer(model, args.outer_lr, args.outer_momentum) if args.local_steps > 0 else None
    ddp = model if diloco else nn.parallel.DistributedDataParallel(model)
    if args.powersgd_rank > 0:
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as power_sgd
        state = power_sgd.PowerSGDState(process_group=None,
                                        matrix_approximation_rank=args.powersgd_rank,
                                        start_powerSGD_iter=args.powersgd_start)
        ddp.register_comm_hook(state, power_sgd.powerSGD_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=lr, momentum=momentum, nesterov=True,
                          weight_decay=l2)
    loss_fn = nn.CrossEntropyLoss()
    n = x.shape[0]
    begin, end = n * rank // world, n * (rank + 1) // world
    # Every rank takes the same number of steps (DDP is synchronous): the smallest slice's.
    steps_per_epoch = (n // world + args.batch - 1) // args.batch
    steps, seconds, inner_seconds = 0, 0.0, 0.0
    for epoch in range(args.epochs):
        g = torch.Generator().manual_seed(12345 + epoch)
        mine = torch.randperm(n, generator=g)[begin:end]
        start = time.perf_counter()
        for s in range(steps_per_epoch):
            idx = mine[s * args.batch:(s + 1) * args.batch]
            for group in opt.param_groups:
                group["lr"] = lr * gamma ** (steps * world)
            inner_start = time.perf_counter()
            opt.zero_grad()
            loss_fn(ddp(x[idx]), y[idx]).backward()
            opt.step()
            inner_seconds += time.perf_counter() - inner_start
            steps += 1
            if diloco and steps % args.local_steps == 0:
                diloco.round(world)
        seconds += time.perf_counter() - start
        done = torch.zeros(1)
        if rank == 0:
            with torch.no_grad():
                evaluated = diloco.global_model() if diloco else model
                accuracy = (evaluated(tx).argmax(1) == ty).float().mean().item()
            print(f"epoch {epoch + 1} seconds {seconds:.2f} accuracy {accuracy:.4f}", flush=True)
            done[0] = 1.0 if accuracy >= args.target else 0.0
        dist.broadcast(done, 0)
        if done[0] > 0:
            break
    print(f"steps {steps}", flush=True)
    if rank == 0 and seconds > 0:
        computed = inner_seconds if diloco else steps * one_step
        print(f"compute_share {min(1.0, computed / seconds):.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
