#!/usr/bin/env python3
"""Writes a CIFAR-10-format binary folder (cifar-10-batches-bin layout) of generated images:
tests/e2e/fake_cifar10.py OUT_DIR TRAIN_PER_BATCH TEST_COUNT. Class c's images are noise over a
colour and a bright square whose place depends on c, so a small CNN learns them in an epoch.
Seeded: the same arguments give the same bytes."""
import os
import random
import sys

NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def record(rng, label):
    planes = []
    sx, sy = (label % 5) * 6 + 1, (label // 5) * 16 + 4
    for channel in range(3):
        base = 40 + 20 * ((label + channel) % 4)
        plane = bytearray(rng.randrange(base, base + 60) for _ in range(1024))
        for y in range(sy, sy + 8):
            for x in range(sx, sx + 8):
                plane[y * 32 + x] = 230 if channel != label % 3 else 120
        planes.append(bytes(plane))
    return bytes([label]) + b"".join(planes)


def main():
    out, per_batch, test = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    os.makedirs(out, exist_ok=True)
    rng = random.Random(7)
    with open(os.path.join(out, "batches.meta.txt"), "w") as f:
        f.write("\n".join(NAMES) + "\n\n")
    files = [("data_batch_%d.bin" % i, per_batch) for i in range(1, 6)] + [("test_batch.bin", test)]
    for name, count in files:
        with open(os.path.join(out, name), "wb") as f:
            for i in range(count):
                f.write(record(rng, i % 10))


if __name__ == "__main__":
    main()
