"""PyTorch DDP baseline for tools/bench/cluster: the MLP of configs/fashion-mnist-mlp.yaml
trained synchronously by one process per namespaced host (gloo backend), batch 64 per worker,
the spec's optimizer (Nesterov, lr 0.05, momentum 0.8, L2 1e-4, lr x 0.9997 per minibatch of
the whole job), each host taking its slice of a shared per-epoch permutation, as dtrain does.

Run with Debian's /usr/bin/python3 (python3-torch on OpenBLAS), once per host, with RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT set. Rank 0 evaluates after every epoch and prints
"epoch E seconds T accuracy A" (T: training time so far, evaluation excluded); training stops
once the accuracy reaches --target or after --epochs. Every rank prints "steps S" at the end.

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


def load(split):
    x = read_idx(DATA + f"{split}-images-idx3-ubyte.gz").astype(np.float32) / 255.0
    y = read_idx(DATA + f"{split}-labels-idx1-ubyte.gz").astype(np.int64)
    return torch.from_numpy(x.reshape(len(x), -1)), torch.from_numpy(y)


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
    p.add_argument("--lr", type=float, default=0.05)
    args = p.parse_args()
    require_openblas()
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(12345)
    x, y = load("train")
    tx, ty = load("t10k")
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                          nn.Linear(128, 10))
    diloco = Outer(model, args.outer_lr, args.outer_momentum) if args.local_steps > 0 else None
    ddp = model if diloco else nn.parallel.DistributedDataParallel(model)
    if args.powersgd_rank > 0:
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as power_sgd
        state = power_sgd.PowerSGDState(process_group=None,
                                        matrix_approximation_rank=args.powersgd_rank,
                                        start_powerSGD_iter=args.powersgd_start)
        ddp.register_comm_hook(state, power_sgd.powerSGD_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.8, nesterov=True,
                          weight_decay=1e-4)
    loss_fn = nn.CrossEntropyLoss()
    n = x.shape[0]
    begin, end = n * rank // world, n * (rank + 1) // world
    # Every rank takes the same number of steps (DDP is synchronous): the smallest slice's.
    steps_per_epoch = (n // world + args.batch - 1) // args.batch
    steps, seconds = 0, 0.0
    for epoch in range(args.epochs):
        g = torch.Generator().manual_seed(12345 + epoch)
        mine = torch.randperm(n, generator=g)[begin:end]
        start = time.perf_counter()
        for s in range(steps_per_epoch):
            idx = mine[s * args.batch:(s + 1) * args.batch]
            for group in opt.param_groups:
                group["lr"] = args.lr * 0.9997 ** (steps * world)
            opt.zero_grad()
            loss_fn(ddp(x[idx]), y[idx]).backward()
            opt.step()
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
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
