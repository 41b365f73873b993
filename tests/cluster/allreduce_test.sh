#!/usr/bin/env bash
# mode allreduce (docs/architecture/core.md, "Dense all-reduce") on 3 daemons x 2 workers: every
# step's gradients are summed over the 6 workers by a ring all-reduce between the nodes, and
# every replica takes the same step.
# 1. With the gradient in two buckets (training.allreduce.bucket_mb: 0.1; the first goes while
#    the first layer's backward runs), node-3 ends itself a third of the way into epoch 2: the ring goes on over the two others
#    after the peer timeout, they do exactly node-3's minibatches left at the epoch's end, and
#    node-3, restarted, rejoins with the parameters and the updater's state: the job succeeds and
#    every replica, node-3's included, is the same bits at the end. The survivors' replicas
#    differ after the takeover (each did its part alone), so epoch 2's end averages them; the
#    other epoch ends only compare digests.
# 2. A job on all three trains the MLP to 0.87, with the same replica printed by every node at
#    every epoch end, and no epoch end averaging (the replicas were the same bits).
set -u
SPEC="$(cd "$(dirname "$4")" && pwd)/$(basename "$4")"
source "$(dirname "$0")/lib.sh" allreduce "$1" "$2" "$3"
export PEER_TIMEOUT_MS=3000 HEARTBEAT_MS=300
# Read by node-3's first process only: restarted by lose_and_restart, it runs without it.
export NODE_ENV_3="DTRAIN_TEST_FAULT=exit_in_epoch:2"

# 16 examples a worker, 96 a step: 625 minibatches in each worker's shard of 10000.
allreduce_spec() {  # allreduce_spec EPOCHS NAME
  sed -e "s/workers_per_node: auto/workers_per_node: 2/" -e "/^  sync: bsp$/d" \
      -e "s/^  mode: gradient_sharing$/  mode: allreduce/" -e '/^  threshold:/d' -e '/^  residual:/d' \
      -e "s/epochs: 5/epochs: $1/" -e 's/  batch_size: 64/  batch_size_per_worker: 16/' \
      -e 's/checkpoint_every: 1000/checkpoint_every: 0/' -e "s/name: fashion-mnist-mlp/name: $2/" \
      -e "s/model: fashion-mnist-mlp.dtm/model: $2.dtm/" "$SPEC"
}
"$CLUSTER_TOOL" start 3 "$WORK/c" > start.out || { echo "FAIL: the cluster did not start"; cat start.out; exit 1; }
source "$WORK/c/env"

# 1. A node lost mid-epoch, and back.
allreduce_spec 4 allreduce-kill | sed -e 's/^  mode: allreduce$/&\n  allreduce: {bucket_mb: 0.1}/' > kill.yaml
grep -q "^  allreduce: {bucket_mb: 0.1}$" kill.yaml || fail "the spec was not made: $(cat kill.yaml)"
id=$("$SUBMIT" kill.yaml --detach) || fail "submit the first job"
await_fault_exit node-3 120 || exit 1
k=$(grep -o "ends itself with SIGKILL at minibatch [0-9]* of 625 in epoch 2" "$WORK/c/node-3.log" |
    sed -nE 's/.*minibatch ([0-9]+) of.*/\1/p' | tail -n 1)
[[ -n $k ]] || fail "node-3's log does not say at which minibatch of 625 it ended: $(tail -n 3 "$WORK/c/node-3.log")"
lose_and_restart node-3 "$id" kill.json
state=$(wait_job_end "$id" kill.json 180)
"$SUBMIT" logs "$id" > kill.log
[[ $state == succeeded ]] || fail "with node-3 lost, job $id ended '$state': $(json kill.json "j.get('error')")"
json kill.json "j['result']['lost_nodes']" | grep -q node-3 || fail "result.lost_nodes lacks node-3"
json kill.json "j['result']['rejoined_nodes']" | grep -q node-3 ||
  fail "node-3 did not rejoin: $(grep -i node-3 kill.log | tail -n 5)"
grep -q "node-1: allreduce: a step's gradient goes in 2 buckets (.*), each sent as the backward pass finishes it" kill.log ||
  fail "node-1 does not say the gradient goes in 2 overlapped buckets: $(grep -i bucket kill.log | head -n 3)"
check_trained kill.json "with node-3 lost and back: "
nodes=$(json kill.json "j['result'].get('replicas_compared', 0)")
echo "with node-3 lost at minibatch $k of epoch 2 and back: accuracy $acc, replicas of $nodes nodes differ by $diff"
[[ $nodes -eq 3 ]] || fail "$nodes replicas were compared at the end, not 3 (node-3's rejoined one included)"
# node-3 did minibatches 1..k of its two shards; the survivors did the rest, once.
left=$(grep -E "node-[12]: epoch 2: " kill.log | sed -nE 's/.*did ([0-9]+) minibatches of lost nodes.*/\1/p' |
       awk '{ s += $1 } END { print s + 0 }')
echo "minibatches of node-3 done by the survivors in epoch 2: $left (expected $((2 * (625 - k))))"
[[ $left -eq $((2 * (625 - k))) ]] ||
  fail "the survivors did $left of node-3's minibatches, not 2 x (625 - $k): $(grep -E "node-[12]: epoch 2: " kill.log)"
[[ $(grep -cE "node-[12]: epoch 2: .*replicas differed: averaged densely" kill.log) -eq 2 ]] ||
  fail "epoch 2's end did not average the survivors' replicas: $(grep -E "node-[12]: epoch 2: " kill.log)"
! grep -E "epoch [134]: .*replicas differed" kill.log ||
  fail "an epoch end without a takeover averaged"

# 2. The whole job on three nodes.
allreduce_spec 5 allreduce > whole.yaml
id=$("$SUBMIT" whole.yaml --detach) || fail "submit"
state=$(wait_job_end "$id" whole.json 180)
[[ $state == succeeded ]] || fail "job $id ended '$state': $(json whole.json "j.get('error')")"
"$SUBMIT" logs "$id" > whole.log
check_trained whole.json
echo "allreduce: accuracy $acc, replicas differ by $diff"
python3 -c "import sys; sys.exit(0 if $acc >= 0.87 else 1)" || fail "accuracy $acc < 0.87 after 5 epochs"
[[ $(json whole.json "j['mode']") == allreduce ]] || fail "the job's mode is $(json whole.json "j['mode']")"
# Each epoch end's replica figures, printed by every node (the last epoch's line ends there).
for e in 1 2 3 4; do
  lines=$(grep -c "node-[123]: epoch $e: .*replica" whole.log)
  distinct=$(grep "node-[123]: epoch $e: " whole.log | sed -nE 's/.*replica ([^,]*),.*/\1/p' | sort -u | wc -l)
  [[ $lines -eq 3 && $distinct -eq 1 ]] ||
    fail "epoch $e: $lines nodes reported, $distinct different replicas: $(grep "epoch $e: " whole.log)"
done
! grep "replicas differed" whole.log || fail "the whole job's replicas differed at an epoch end"
finish allreduce
