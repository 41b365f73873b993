#!/usr/bin/env bash
# NCCL between nodes on a machine with two GPUs or more (docs/architecture/daemon.md, "NCCL
# between nodes"): two daemons, each seeing its own GPU (CUDA_VISIBLE_DEVICES), train the MLP
# under mode allreduce. The controller (node-1's daemon) makes the communicator's id, both nodes
# join it, and every step's sums go over NCCL: the job's log and both nodes' say so, none falls
# back to the mesh, the job succeeds to 0.8 with the same replica on both.
# Needs a --config=cuda build and libnccl: tools/gpu/checks.sh runs it (`nccl-cluster`). Not a
# Bazel target: with fewer than two GPUs it prints SKIPPED and exits 77.
#   tests/cluster/nccl_cluster_test.sh DTRAIND SUBMIT tools/local_cluster.sh configs/fashion-mnist-mlp.yaml
set -u
SPEC="$(cd "$(dirname "$4")" && pwd)/$(basename "$4")"
source "$(dirname "$0")/lib.sh" nccl_cluster "$1" "$2" "$3"
gpus=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU ')
if (( gpus < 2 )); then
  echo "SKIPPED: $gpus GPU(s) here; NCCL between nodes needs a GPU for each of two daemons"
  exit 77
fi
export GPU_NODES=2 PEER_TIMEOUT_MS=3000 HEARTBEAT_MS=300
# One GPU each (NCCL refuses two ranks on one GPU); NCCL's bootstrap and sockets on loopback.
export NODE_ENV_1="CUDA_VISIBLE_DEVICES=0 NCCL_SOCKET_IFNAME=lo"
export NODE_ENV_2="CUDA_VISIBLE_DEVICES=1 NCCL_SOCKET_IFNAME=lo"

"$CLUSTER_TOOL" start 2 "$WORK/c" > start.out || { echo "FAIL: the cluster did not start"; cat start.out; exit 1; }
source "$WORK/c/env"
sed -e "s/workers_per_node: auto/workers_per_node: 1/" -e "/^  sync: bsp$/d" \
    -e "s/^  mode: gradient_sharing$/  mode: allreduce\n  device: gpu/" \
    -e '/^  threshold:/d' -e '/^  residual:/d' -e "s/epochs: 5/epochs: 2/" \
    -e 's/checkpoint_every: 1000/checkpoint_every: 0/' "$SPEC" > nccl.yaml
grep -q "^  mode: allreduce$" nccl.yaml || fail "the spec was not made: $(cat nccl.yaml)"
id=$("$SUBMIT" nccl.yaml --detach) || fail "submit"
state=$(wait_job_end "$id" nccl.json 300)
"$SUBMIT" logs "$id" > nccl.log
[[ $state == succeeded ]] || fail "the job ended '$state': $(json nccl.json "j.get('error')")"
grep -q "the nodes sum over NCCL between them" nccl.log ||
  fail "the job's log does not say the nodes sum over NCCL: $(grep -i 'nccl\|mesh' nccl.log | head -n 3)"
for n in 1 2; do
  grep -q "job $id: the sums between nodes go over nccl .* between 2 nodes" "$WORK/c/node-$n.log" ||
    fail "node-$n did not sum over NCCL: $(grep -i 'sums between\|nccl' "$WORK/c/node-$n.log" | tail -n 3)"
  if grep -q "job $id: the sums between nodes go over the mesh" "$WORK/c/node-$n.log"; then
    fail "node-$n went over the mesh: $(grep "sums between nodes" "$WORK/c/node-$n.log" | tail -n 1)"
  fi
done
acc=$(json nccl.json "j['result'].get('accuracy', 0)")
diff=$(json nccl.json "j['result'].get('replica_max_relative_difference', 1)")
echo "over NCCL between 2 nodes: accuracy $acc, replicas differ by $diff"
[[ $diff == 0.0 ]] || fail "the replicas differ by $diff (NCCL gives every rank the same sum)"
python3 -c "import sys; sys.exit(0 if $acc >= 0.8 else 1)" || fail "accuracy $acc < 0.8 after 2 epochs"
finish nccl_cluster
