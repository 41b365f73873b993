#!/usr/bin/env python3
"""Converts a CIFAR-10 binary archive into image folders dtrain reads (`format: images`).

    tools/data/cifar10_to_images.py cifar-10-binary.tar.gz --out cifar10
    tools/data/cifar10_to_images.py cifar-10-batches-bin/ --out cifar10 [--limit 1000]

writes cifar10/train/<class>/<n>.png (data_batch_1..5) and cifar10/test/<class>/<n>.png
(test_batch), the class names from batches.meta.txt. The input is the "binary version" from
the CIFAR-10 page (https://www.cs.toronto.edu/~kriz/cifar.html), which you download yourself:
each record is one label byte and 3072 pixel bytes (1024 red, then green, then blue, rows of 32).
Only Python's standard library is used (PNGs are written with zlib).
"""
import argparse
import io
import os
import struct
import sys
import tarfile
import zlib

RECORD = 1 + 3 * 32 * 32
TRAIN = ["data_batch_%d.bin" % i for i in range(1, 6)]
TEST = ["test_batch.bin"]


def png_bytes(rgb_planes):
    """A 32x32 RGB PNG from the record's three 1024-byte planes."""
    r, g, b = rgb_planes[:1024], rgb_planes[1024:2048], rgb_planes[2048:]
    rows = bytearray()
    for y in range(32):
        rows.append(0)  # filter: none
        for x in range(32):
            i = y * 32 + x
            rows += bytes((r[i], g[i], b[i]))

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    header = struct.pack(">IIBBBBB", 32, 32, 8, 2, 0, 0, 0)  # 8-bit RGB
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) +
            chunk(b"IDAT", zlib.compress(bytes(rows), 6)) + chunk(b"IEND", b""))


class Source:
    """The archive (.tar.gz) or the extracted cifar-10-batches-bin folder."""

    def __init__(self, path):
        self.tar = tarfile.open(path) if os.path.isfile(path) else None
        self.dir = None if self.tar else path
        if not self.tar and not os.path.isdir(path):
            sys.exit("error: '%s' is neither a file nor a folder\n"
                     "  fix: pass cifar-10-binary.tar.gz or its cifar-10-batches-bin folder" % path)

    def read(self, name):
        if self.dir:
            full = os.path.join(self.dir, name)
            if not os.path.exists(full):
                return None
            with open(full, "rb") as f:
                return f.read()
        for member in self.tar.getmembers():
            if os.path.basename(member.name) == name:
                return self.tar.extractfile(member).read()
        return None


def class_names(source):
    meta = source.read("batches.meta.txt")
    if meta is None:
        sys.exit("error: batches.meta.txt is missing\n  fix: pass the CIFAR-10 *binary* version")
    names = [line.strip() for line in meta.decode().splitlines() if line.strip()]
    if len(names) != 10:
        sys.exit("error: batches.meta.txt names %d classes, CIFAR-10 has 10" % len(names))
    return names


def convert(source, files, names, out, limit):
    counts = [0] * len(names)
    written = 0
    for name in files:
        data = source.read(name)
        if data is None:
            sys.exit("error: %s is missing from the input\n"
                     "  fix: pass the complete CIFAR-10 binary archive" % name)
        if len(data) % RECORD:
            sys.exit("error: %s is %d bytes, not a whole number of %d-byte records"
                     % (name, len(data), RECORD))
        for at in range(0, len(data), RECORD):
            if limit and written >= limit:
                return written
            label = data[at]
            if label >= len(names):
                sys.exit("error: %s record %d has label %d" % (name, at // RECORD, label))
            folder = os.path.join(out, names[label])
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, "%05d.png" % written), "wb") as f:
                f.write(png_bytes(data[at + 1:at + RECORD]))
            counts[label] += 1
            written += 1
    return written


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", help="cifar-10-binary.tar.gz or the cifar-10-batches-bin folder")
    p.add_argument("--out", required=True, help="folder to write train/ and test/ into")
    p.add_argument("--limit", type=int, default=0, help="at most this many images per split (0: all)")
    a = p.parse_args()
    source = Source(a.input)
    names = class_names(source)
    for split, files in (("train", TRAIN), ("test", TEST)):
        n = convert(source, files, names, os.path.join(a.out, split), a.limit)
        print("%s: %d images in %s" % (split, n, os.path.join(a.out, split)))


if __name__ == "__main__":
    main()
