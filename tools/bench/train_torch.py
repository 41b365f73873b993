"""PyTorch baseline for tools/bench/train: the same models, batch and data as dtrain's specs.

Run with Debian's /usr/bin/python3 (python3-torch, OpenBLAS). Prints one line per repeat:
"samples_per_sec <value>".
"""
import argparse
import gzip
import struct
import time

import numpy as np
import torch
import torch.nn as nn

from bench_models import make_model
from blas_check import require_openblas

DATA = "/usr/share/datasets/fashion-mnist/"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(split):
    x = read_idx(DATA + f"{split}-images-idx3-ubyte.gz").astype(np.float32) / 255.0
    y = read_idx(DATA + f"{split}-labels-idx1-ubyte.gz").astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model", choices=["mlp", "lenet", "resnet20"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--iterations", type=int, default=300)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--profile", action="store_true",
                   help="after the warm-up, profile --iterations steps with torch.profiler and "
                        "print its table of operators instead of the throughput")
    p.add_argument("--generated", type=int, default=0,
                   help="N random examples instead of Fashion-MNIST (resnet20: 3x32x32)")
    args = p.parse_args()
    require_openblas()
    torch.set_num_threads(args.threads)
    torch.manual_seed(12345)
    if args.generated > 0:  # as dtrain's train_bench --generated: noise, random labels
        shape = (3, 32, 32) if args.model == "resnet20" else (1, 28, 28)
        x, y = torch.rand((args.generated,) + shape), torch.randint(0, 10, (args.generated,))
    else:
        x, y = load("train")
        x = x.reshape(-1, 1, 28, 28)
    model = make_model(args.model)
    lr = {"mlp": 0.05, "lenet": 0.04, "resnet20": 0.1}[args.model]
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, nesterov=True,
                          weight_decay=1e-4)
    loss_fn = nn.CrossEntropyLoss()
    perm = torch.randperm(x.shape[0])
    cursor = 0

    def step():
        nonlocal cursor, perm
        if cursor + args.batch > x.shape[0]:
            perm, cursor = torch.randperm(x.shape[0]), 0
        idx = perm[cursor:cursor + args.batch]
        cursor += args.batch
        xb, yb = x[idx], y[idx]
        opt.zero_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        return xb.shape[0]

    for _ in range(args.warmup):
        step()
    if args.profile:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(args.iterations):
                step()
        print(f"torch.profiler, {args.iterations} steps (times are totals over them):")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20))
        return
    for _ in range(args.repeats):
        start, samples = time.perf_counter(), 0
        for _ in range(args.iterations):
            samples += step()
        print(f"samples_per_sec {samples / (time.perf_counter() - start):.1f}", flush=True)


if __name__ == "__main__":
    main()
