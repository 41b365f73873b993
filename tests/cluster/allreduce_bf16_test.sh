#!/usr/bin/env bash
# mode allreduce with training.precision: bf16 on 3 daemons with GPUs (emulated ones here:
# DTRAIN_EMULATED_GPUS, CPU arithmetic behind device-memory discipline; REAL_GPUS=1 on a GPU
# machine with a --config=cuda build): the ring's parts go as bf16 (core/collective/ring_wire.h),
# so a node sends about half the bytes of the same job in fp32, and every replica is still the
# same bits. Both jobs train 1 epoch; the bf16 one to 0.8.
set -u
SPEC="$(cd "$(dirname "$4")" && pwd)/$(basename "$4")"
source "$(dirname "$0")/lib.sh" allreduce_bf16 "$1" "$2" "$3"
export GPU_NODES=3
[[ ${REAL_GPUS:-0} == 1 ]] || export EMULATED_GPUS=1

"$CLUSTER_TOOL" start 3 "$WORK/c" > start.out || { echo "FAIL: the cluster did not start"; cat start.out; exit 1; }
source "$WORK/c/env"

gpu_spec() {  # gpu_spec PRECISION
  sed -e "s/workers_per_node: auto/workers_per_node: 1/" -e "/^  sync: bsp$/d" \
      -e "s/^  mode: gradient_sharing$/  mode: allreduce\n  device: gpu\n  precision: $1/" \
      -e '/^  threshold:/d' -e '/^  residual:/d' -e "s/epochs: 5/epochs: 1/" \
      -e 's/checkpoint_every: 1000/checkpoint_every: 0/' -e "s/name: fashion-mnist-mlp/name: ar-$1/" \
      -e "s/model: fashion-mnist-mlp.dtm/model: ar-$1.dtm/" "$SPEC"
}
declare -A bytes
for precision in fp32 bf16; do
  gpu_spec $precision > $precision.yaml
  grep -q "^  precision: $precision$" $precision.yaml || fail "the spec was not made: $(cat $precision.yaml)"
  id=$("$SUBMIT" $precision.yaml --detach) || fail "submit $precision"
  state=$(wait_job_end "$id" $precision.json 240)
  [[ $state == succeeded ]] || fail "the $precision job ended '$state': $(json $precision.json "j.get('error')")"
  diff=$(json $precision.json "j['result'].get('replica_max_relative_difference', 1)")
  acc=$(json $precision.json "j['result'].get('accuracy', 0)")
  [[ $diff == 0.0 ]] || fail "$precision: the replicas differ by $diff"
  bytes[$precision]=$(json $precision.json "j['result'].get('mesh_bytes_sent', 0)")
  # GPU nodes under allreduce are offered NCCL between them; where the controller cannot make
  # its id (a build without CUDA, as here), the job's log and every node's say why, and the
  # sums go over the mesh (what the byte counts below measure).
  "$SUBMIT" logs "$id" > $precision.log
  if [[ ${REAL_GPUS:-0} != 1 ]]; then
    why="the controller could not make an NCCL id"
    grep -q "the nodes sum over the mesh: $why: this build has no CUDA" $precision.log ||
      fail "$precision: the job's log does not say why NCCL is not used: $(grep -i nccl $precision.log)"
    for n in 1 2 3; do
      grep -q "job $id: the sums between nodes go over the mesh: $why" "$WORK/c/node-$n.log" ||
        fail "node-$n's log does not say why NCCL is not used:" \
             "$(grep -i 'nccl\|sums between' "$WORK/c/node-$n.log" | tail -n 3)"
    done
  fi
  echo "$precision: accuracy $acc, replicas differ by $diff, the first node sent ${bytes[$precision]} bytes"
done
python3 -c "import sys; sys.exit(0 if $acc >= 0.8 else 1)" || fail "bf16: accuracy $acc < 0.8 after an epoch"
ratio=$(python3 -c "print(round(${bytes[bf16]} / max(1, ${bytes[fp32]}), 3))")
echo "bf16 / fp32 bytes: $ratio"
python3 -c "import sys; sys.exit(0 if 0.45 <= $ratio <= 0.6 else 1)" ||
  fail "bf16 sent $ratio of fp32's bytes, not about half"
finish allreduce_bf16
