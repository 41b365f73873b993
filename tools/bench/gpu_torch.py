"""PyTorch baseline for tools/bench/gpu: the same models (MLP, LeNet, the wide CNN of
gpu_models/widecnn.yaml), batch sizes and data as dtrain's GPU benchmark, in eager mode on CUDA.

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

from train_torch import DATA, read_idx  # the CPU baseline's IDX reader (same directory)


def make_model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                             nn.ReLU(), nn.Linear(128, 10))
    if name == "lenet":
        return nn.Sequential(nn.Conv2d(1, 20, 5), nn.MaxPool2d(2), nn.Conv2d(20, 50, 5),
                             nn.MaxPool2d(2), nn.Flatten(), nn.Linear(800, 500), nn.ReLU(),
                             nn.Linear(500, 10))

    def block(cin, cout):  # as dtrain's spec: conv with relu, then batch norm
        return [nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(), nn.BatchNorm2d(cout, momentum=0.1)]
    return nn.Sequential(*block(1, 64), nn.MaxPool2d(2), *block(64, 128), nn.MaxPool2d(2),
                         *block(128, 256), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(256, 10))


HYPER = {"mlp": (0.05, 0.8, 1e-4), "lenet": (0.04, 0.9, 5e-4), "widecnn": (0.02, 0.9, 0.0)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model", choices=["mlp", "lenet", "widecnn"])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--iterations", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(12345)
    torch.backends.cudnn.benchmark = True
    x = torch.from_numpy(read_idx(DATA + "train-images-idx3-ubyte.gz").astype(np.float32) / 255.0)
    y = torch.from_numpy(read_idx(DATA + "train-labels-idx1-ubyte.gz").astype(np.int64))
    x = x.reshape(-1, 1, 28, 28).to(device)
    y = y.to(device)
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
        loss = loss_fn(model(x[idx]), y[idx])
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
