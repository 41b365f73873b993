"""PyTorch baseline for tools/bench/gpu: the same models (MLP, LeNet, the wide CNN of
gpu_models/widecnn.yaml, ResNet-20 of configs/cifar10-resnet20.yaml), batch sizes and data as
dtrain's GPU benchmark, in eager mode on CUDA; fp32, or autocast to bf16/fp16 (fp16 with a
GradScaler), as dtrain's training.precision.

The baseline is made as fast as eager PyTorch honestly gets: the whole training set is moved
to the GPU once (dtrain copies each minibatch from the host), cuDNN autotuning is on, and
matmul TF32 is left at PyTorch's default (off) while cuDNN's TF32 stays at its default (on),
which is what dtrain's CUDA backend does too.

Prints one line per repeat: "samples_per_sec <value>". --device cpu runs a smoke test anywhere.
"""
import argparse
import time

import numpy as np
import torch
import torch.nn as nn

from bench_models import make_model  # the models (same directory)
from train_torch import DATA, read_idx  # the CPU baseline's IDX reader (same directory)


HYPER = {"mlp": (0.05, 0.8, 1e-4), "lenet": (0.04, 0.9, 5e-4), "widecnn": (0.02, 0.9, 0.0),
         "resnet20": (0.1, 0.9, 1e-4)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model", choices=["mlp", "lenet", "widecnn", "resnet20"])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--iterations", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device", default="cuda")
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    p.add_argument("--generated", type=int, default=0,
                   help="N random examples instead of Fashion-MNIST (resnet20: 3x32x32)")
    args = p.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(12345)
    torch.backends.cudnn.benchmark = True
    if args.generated > 0:
        shape = (3, 32, 32) if args.model == "resnet20" else (1, 28, 28)
        x = torch.rand((args.generated,) + shape, device=device)
        y = torch.randint(0, 10, (args.generated,), device=device)
    else:
        x = torch.from_numpy(read_idx(DATA + "train-images-idx3-ubyte.gz").astype(np.float32) / 255.0)
        y = torch.from_numpy(read_idx(DATA + "train-labels-idx1-ubyte.gz").astype(np.int64))
        x = x.reshape(-1, 1, 28, 28).to(device)
        y = y.to(device)
    amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
    scaler = None
    if args.precision == "fp16":  # torch.amp.GradScaler since 2.3; torch.cuda.amp before
        scaler = (torch.amp.GradScaler(device.type) if hasattr(torch.amp, "GradScaler")
                  else torch.cuda.amp.GradScaler())
    model = make_model(args.model).to(device)
    lr, momentum, l2 = HYPER[args.model]
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, nesterov=True,
                          weight_decay=l2)
    loss_fn = nn.CrossEntropyLoss()
    n = x.shape[0]
    perm = torch.randperm(n, device=device)
    cursor = 0

    def step():
        nonlocal cursor, perm
        if cursor + args.batch > n:
            perm, cursor = torch.randperm(n, device=device), 0
        idx = perm[cursor:cursor + args.batch]
        cursor += args.batch
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
            loss = loss_fn(model(x[idx]), y[idx])
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        return args.batch

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(args.warmup):
        step()
    sync()
    for _ in range(args.repeats):
        start, samples = time.perf_counter(), 0
        for _ in range(args.iterations):
            samples += step()
        sync()
        print(f"samples_per_sec {samples / (time.perf_counter() - start):.1f}", flush=True)


if __name__ == "__main__":
    main()
