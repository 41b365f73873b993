#!/usr/bin/env python3
"""Writes the regression example's data (configs/regression-mlp.yaml): OUT/train.csv and
OUT/test.csv, a header line and then rows x0..x7,y0,y1.

The eight features are uniform in [-1, 1]; the two targets are smooth non-linear functions of
them plus Gaussian noise (standard deviation --noise), so a small MLP can explain most of their
variance (R^2 near 1) but a linear model cannot. Standard library only; the same seed writes
the same files.

    python3 tools/data/make_regression_csv.py configs/regression-data
"""
import argparse
import math
import os
import random
import sys

FEATURES = 8


def targets(x):
    y0 = 1.5 * x[0] - x[1] + 0.8 * x[2] * x[3] + math.sin(3.0 * x[4])
    y1 = x[5] * x[5] - 0.5 * x[6] + 0.7 * math.cos(2.0 * x[7]) + 0.3 * x[0]
    return y0, y1


def write(path, rows, rng, noise):
    with open(path, "w") as f:
        f.write(",".join([f"x{i}" for i in range(FEATURES)] + ["y0", "y1"]) + "\n")
        for _ in range(rows):
            x = [rng.uniform(-1.0, 1.0) for _ in range(FEATURES)]
            y = [t + rng.gauss(0.0, noise) for t in targets(x)]
            f.write(",".join(f"{v:.6f}" for v in x + y) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="folder to write train.csv and test.csv into")
    parser.add_argument("--train", type=int, default=8000, help="training rows (default 8000)")
    parser.add_argument("--test", type=int, default=2000, help="test rows (default 2000)")
    parser.add_argument("--noise", type=float, default=0.05, help="target noise (default 0.05)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    if args.train < 1 or args.test < 1 or args.noise < 0:
        sys.exit("error: --train and --test must be at least 1 and --noise not negative")
    try:
        os.makedirs(args.out, exist_ok=True)
        rng = random.Random(args.seed)
        write(os.path.join(args.out, "train.csv"), args.train, rng, args.noise)
        write(os.path.join(args.out, "test.csv"), args.test, rng, args.noise)
    except OSError as e:
        sys.exit(f"error: cannot write into '{args.out}': {e.strerror}\n  fix: choose a folder you can write")
    print(f"wrote {args.train} training and {args.test} test rows to {args.out}/train.csv and test.csv")


if __name__ == "__main__":
    main()
