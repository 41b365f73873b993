"""gloo's all-reduce alone, the baseline of tools/bench/ring_allreduce: one process per namespaced
host (RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set, as torch.distributed's env:// wants),
each summing a float32 tensor of --values with dist.all_reduce (gloo, as PyTorch DDP uses on
CPUs): one round to warm up, then --repeats rounds, each from a fresh copy of the rank's values
after a barrier (neither timed, as in ring_member.cc) and each timed. Every rank prints "round R
seconds S" a round. Every round's sums
are checked (each rank's value k is rank + 1 + k % 7 + (1 + k % 5) / 4096, as in ring_member.cc:
every order of adding gives the same exact sum): exit 1 if any differs. Run with Debian's
/usr/bin/python3.
"""
import argparse
import datetime
import sys
import time

import torch
import torch.distributed as dist


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--values", type=int, required=True)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--run", default="", help="the driver's run directory (how it finds us to stop)")
    args = p.parse_args()
    torch.set_num_threads(1)
    # A host that fails ends the others' waits within a minute, not gloo's default 30.
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    k = torch.arange(args.values, dtype=torch.int64) % 7
    fraction = (1 + k % 5).to(torch.float64) / 4096
    mine = (k + rank + 1 + fraction).to(torch.float32)
    expected = (world * (k + fraction) + world * (world + 1) // 2).to(torch.float32)
    for r in range(args.repeats + 1):
        v = mine.clone()
        dist.barrier()
        begin = time.perf_counter()
        dist.all_reduce(v)
        seconds = time.perf_counter() - begin
        if not torch.equal(v, expected):
            wrong = int((v != expected).sum())
            print(f"rank {rank}: round {r}: {wrong} of {args.values} sums wrong", file=sys.stderr)
            return 1
        if r > 0:
            print(f"round {r} seconds {seconds:.6f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
