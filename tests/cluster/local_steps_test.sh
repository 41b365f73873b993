#!/usr/bin/env bash
# Local steps with an outer optimizer (docs/architecture/core.md, "Local steps") on 3 daemons:
# every node steps its own replica 20 minibatches a round, then the nodes exchange one
# threshold-encoded pseudo-gradient each (4 levels) and apply the same outer Nesterov step. The
# job trains to 0.87, the replicas agree at every epoch end (the same printed norm and projection
# on every node) and at the end; with a node killed mid-epoch the others go on without it, and
# once restarted it rejoins. A job of training.sync: auto trains the way node-1 chose.
set -u
SPEC="$(cd "$(dirname "$4")" && pwd)/$(basename "$4")"
source "$(dirname "$0")/lib.sh" local_steps "$1" "$2" "$3"
export PEER_TIMEOUT_MS=3000 HEARTBEAT_MS=300
# node-3 ends itself a third of the way into epoch 5 (core/train/test_fault.h): only the
# 10-epoch job of part 2 gets there.
export NODE_ENV_3="DTRAIN_TEST_FAULT=exit_in_epoch:5"

local_spec() {  # local_spec EPOCHS NAME WORKERS_PER_NODE
  sed -e "s/workers_per_node: auto/workers_per_node: $3/" -e "s/^  sync: bsp$/  sync: {local: {steps: 20}}/" \
      -e "s/epochs: 5/epochs: $1/" -e 's/  batch_size: 64/  batch_size_per_worker: 64/' \
      -e 's/checkpoint_every: 1000/checkpoint_every: 0/' -e "s/name: fashion-mnist-mlp/name: $2/" \
      -e "s/model: fashion-mnist-mlp.dtm/model: $2.dtm/" "$SPEC"
}
"$CLUSTER_TOOL" start 3 "$WORK/c" > start.out || { echo "FAIL: the cluster did not start"; cat start.out; exit 1; }
source "$WORK/c/env"

# 1. The whole job on three nodes.
local_spec 4 local 1 > local.yaml
id=$("$SUBMIT" local.yaml --detach) || fail "submit"
state=$(wait_job_end "$id" local.json 180)
[[ $state == succeeded ]] || fail "job $id ended '$state': $(json local.json "j.get('error')")"
"$SUBMIT" logs "$id" > local.log
check_trained local.json
echo "local steps: accuracy $acc, replicas differ by $diff"
python3 -c "import sys; sys.exit(0 if $acc >= 0.87 else 1)" || fail "accuracy $acc < 0.87 after 4 epochs"
grep -q "local steps: 20 inner steps a round, then the outer nesterov step" local.log ||
  fail "the job's log does not say how it combines the replicas"
# With no node lost the replicas are the same bits at every epoch end: the digests agree and no
# dense average is sent.
! grep -q "replicas differed" local.log ||
  fail "replicas differed with no node lost: $(grep "replicas differed" local.log | head -n 3)"
# Each epoch end's replica figures, printed by every node: one distinct value per epoch.
for e in 1 2 3; do
  lines=$(grep -c "node-[123]: epoch $e: .*replica" local.log)
  distinct=$(grep "node-[123]: epoch $e: " local.log | sed -nE 's/.*replica ([^,]*),.*/\1/p' | sort -u | wc -l)
  [[ $lines -eq 3 && $distinct -eq 1 ]] ||
    fail "epoch $e: $lines nodes reported, $distinct different replicas: $(grep "epoch $e: " local.log)"
done

# 2. Two workers per node, which meet at each round (one message per node). node-3 ends itself
# a third of the way into epoch 5 of 10: the rounds go on without it after the peer timeout. Restarted, it rejoins at an epoch end with the global parameters and the outer
# momentum.
local_spec 10 local-kill 2 > kill.yaml
id=$("$SUBMIT" kill.yaml --detach) || fail "submit the second job"
await_fault_exit node-3 120 || exit 1
lose_and_restart node-3 "$id" kill.json
state=$(wait_job_end "$id" kill.json 180)
"$SUBMIT" logs "$id" > kill.log
[[ $state == succeeded ]] || fail "with node-3 killed, job $id ended '$state': $(json kill.json "j.get('error')")"
json kill.json "j['result']['lost_nodes']" | grep -q node-3 || fail "result.lost_nodes lacks node-3"
json kill.json "j['result']['rejoined_nodes']" | grep -q node-3 ||
  fail "node-3 did not rejoin: $(grep -i node-3 kill.log | tail -n 5)"
grep -q "node-3: rejoined at epoch" kill.log || fail "the log does not say when node-3 rejoined"
check_trained kill.json "with node-3 killed and back: "
echo "with node-3 killed and back: accuracy $acc, replicas differ by $diff"
# The survivors did node-3's remaining minibatches on their own replicas after the epoch's last
# round: the digests differ at that epoch's end and the nodes average densely.
dense=$(grep -c "replicas differed: averaged densely" kill.log)
echo "epoch ends averaged densely: $dense"
[[ $dense -ge 1 ]] || fail "no epoch end averaged densely after node-3 was lost: $(grep "node-1: epoch" kill.log)"
# 3. training.sync: auto: node-1 measures the mesh and times a step, logs its figures and choice,
# and every node trains that way (on loopback either choice may come out: both must hold).
sed -e 's/  sync: {local: {steps: 20}}/  sync: auto/' <(local_spec 3 local-auto 2) > auto.yaml
grep -q "sync: auto" auto.yaml || fail "the auto spec was not made"
id=$("$SUBMIT" auto.yaml --detach) || fail "submit the auto job"
state=$(wait_job_end "$id" auto.json 120)
"$SUBMIT" logs "$id" > auto.log
[[ $state == succeeded ]] || fail "the auto job $id ended '$state': $(json auto.json "j.get('error')")"
choice=$(grep -o "training.sync auto: RTT .*" auto.log | head -n 1)
[[ -n $choice ]] || fail "the log does not say what auto measured and chose: $(head -n 20 auto.log)"
echo "auto: $choice"
sync=$(json auto.json "j['result']['sync']")
if [[ $choice == *"local steps, H = "* ]]; then
  steps=$(sed -nE 's/.*local steps, H = ([0-9]+).*/\1/p' <<< "$choice")
  [[ $sync == local ]] || fail "auto chose local steps, the result says sync '$sync'"
  grep -q "local steps: $steps inner steps a round" auto.log || fail "no node trained with H = $steps"
else
  # The rule's last words, from the probes ("... waits X ms a step ...: per-step sharing") or from
  # the rehearsal ("per-step sharing takes X ms a step, local steps Y ms ...: per-step sharing").
  [[ $choice == *": per-step sharing" && $sync == bsp ]] ||
    fail "auto chose neither local steps nor per-step sharing ('$choice'), or the result says sync '$sync'"
fi
check_trained auto.json "auto: "
finish local_steps
