"""Sums oneDNN's verbose log (ONEDNN_VERBOSE=1) per primitive: where a CNN step's time goes
inside oneDNN, for dtrain and PyTorch alike (both use oneDNN 2.6). Reads the log on stdin and
prints, per (primitive, implementation, pass, shape), milliseconds per step and calls per step,
then the total. Used by tools/bench/cnn_profile.

    python3 onednn_breakdown.py STEPS < verbose.log
"""
import collections
import sys


def main():
    steps = int(sys.argv[1])
    times = collections.defaultdict(float)
    calls = collections.Counter()
    for line in sys.stdin:
        f = line.rstrip("\n").split(",")
        # onednn_verbose,exec,cpu,PRIMITIVE,IMPL,PASS,MEMORY,ATTR,AUX,PROBLEM,TIME
        if len(f) < 11 or f[1] != "exec":
            continue
        layouts = " ".join(m.split(":")[3] for m in f[6].split() if m.count(":") >= 3)
        key = (f[3], f[4], f[5], f[9], layouts)
        times[key] += float(f[10])
        calls[key] += 1
    total = sum(times.values())
    print(f"{'ms/step':>8} {'calls':>5}  primitive, implementation, pass, shape, layouts")
    for key, t in sorted(times.items(), key=lambda kv: -kv[1]):
        if t / steps < 0.05:
            continue
        print(f"{t / steps:8.2f} {calls[key] / steps:5.1f}  {', '.join(key)}")
    print(f"{total / steps:8.2f}        in oneDNN per step ({steps} steps)")


if __name__ == "__main__":
    main()
