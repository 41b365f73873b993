#!/usr/bin/env bash
# Elastic membership (docs/architecture/daemon.md, "Elastic membership"): a job with
# `nodes: {min: 3, max: 4}` starts on the three daemons there, the live nodes doing the vacant
# slot's shard at each epoch end; a fourth daemon started mid-job joins at the next epoch end
# with a live node's parameters, trains the slot's shard from then on (nobody takes it over
# any more), and its replica is in the agreement check and the evaluation. Every wait has a
# deadline and says what it was waiting for.
set -u
SPEC="$(cd "$(dirname "$4")" && pwd)/$(basename "$4")"
source "$(dirname "$0")/lib.sh" elastic "$1" "$2" "$3"
export PEER_TIMEOUT_MS=3000 HEARTBEAT_MS=300

sed -e 's/epochs: 5/epochs: 10/' -e 's/  batch_size: 64/  batch_size_per_worker: 64/' \
    -e 's/  nodes: all/  nodes: {min: 3, max: 4}/' -e 's/workers_per_node: auto/workers_per_node: 1/' \
    -e 's/name: fashion-mnist-mlp/name: elastic/' -e 's/model: fashion-mnist-mlp.dtm/model: elastic.dtm/' \
    "$SPEC" > job.yaml
grep -q "nodes: {min: 3, max: 4}" job.yaml || fail "job.yaml is not elastic"

"$CLUSTER_TOOL" start 3 "$WORK/c" > start.out || { echo "FAIL: the cluster did not start"; cat start.out; exit 1; }
source "$WORK/c/env"
id=$("$SUBMIT" job.yaml --detach) || fail "detached submit"

wait_epoch "$id" 2 60  # on three nodes
"$SUBMIT" status "$id" --json > job.json
[[ $(json job.json "len(j['nodes'])") == 3 ]] || fail "the job started on $(json job.json "j['nodes']")"

# A fourth daemon like the third, on ports of its own.
sed -e 's/node-3/node-4/g' -e 's/data-3/data-4/' -e 's/^\(data: {interface: lo, port: \)[0-9]*/\10/' \
    -e 's/^\(http: {address: 127.0.0.1, port: \)[0-9]*/\10/' "$WORK/c/node-3.yaml" > "$WORK/c/node-4.yaml"
"$DTRAIND" --config "$WORK/c/node-4.yaml" > "$WORK/c/node-4.log" 2>&1 &
echo "$! node-4" >> "$WORK/c/pids"
echo "started node-4 (pid $!) while the job was at epoch $epoch"

state=$(wait_job_end "$id" job.json 240)
"$SUBMIT" logs "$id" > job.log
[[ $state == succeeded ]] ||
  { fail "job $id ended '$state' (waited 240 s): $(json job.json "j.get('error')")"; tail -n 20 job.log; }
json job.json "j['result']['joined_nodes']" | grep -q node-4 ||
  fail "node-4 did not join: $(grep node-4 job.log | tail -n 4)"
joined=$(grep -o "node-4: joined at epoch [0-9]*" job.log | grep -o "[0-9]*$")
[[ -n $joined ]] || fail "the log does not say when node-4 joined"
[[ $(json job.json "len(j['nodes'])") == 4 ]] || fail "the job ends with nodes $(json job.json "j['nodes']")"
[[ $(json job.json "j['lost_nodes']") == "[]" ]] || fail "lost nodes: $(json job.json "j['lost_nodes']")"
# Before it joined, the live nodes did the vacant slot's shard; after, node-4 trains it.
grep -q "node-1: epoch 1: .*minibatches of lost nodes or vacant slots" job.log ||
  fail "in epoch 1 nobody did the vacant slot's minibatches"
grep -q "node-4: epoch 10: " job.log || fail "node-4 did not train the last epoch"
grep "node-1: epoch 10: " job.log | grep -q "minibatches of" &&
  fail "after node-4 joined, node-1 still did the vacant slot's minibatches"
grep -q "evaluation over 4 nodes" job.log || fail "the evaluation was not spread over the 4 nodes"
check_trained job.json
grep -E "elastic|node-4" job.log | cut -c1-160 | head -n 6
echo "node-4 started at epoch $epoch joined at epoch ${joined:-?}: job $state, accuracy $acc," \
  "replicas of 4 nodes within $diff"

echo "== parameter averaging: the vacant slot's shard is averaged in; node-4 joins it"
pid4=$(awk '$2 == "node-4" {print $1}' "$WORK/c/pids")
kill -TERM "$pid4"
for _ in $(seq 1 100); do kill -0 "$pid4" 2> /dev/null || break; sleep 0.1; done
kill -0 "$pid4" 2> /dev/null && fail "node-4 (pid $pid4) still runs 10 s after SIGTERM"
sed -i '/ node-4$/d' "$WORK/c/pids"
gone=""
for _ in $(seq 1 100); do  # 10 s for the controller to see node-4 gone
  "$SUBMIT" nodes --json > nodes.json 2> /dev/null
  gone=$(json nodes.json "[n['state'] for n in j['nodes'] if n['name'] == 'node-4'][0]" 2> /dev/null)
  [[ $gone == lost ]] && break
  sleep 0.1
done
[[ $gone == lost ]] || fail "waited 10 s for the controller to name node-4 lost; it says '$gone'"
sed -e 's/mode: gradient_sharing/mode: parameter_averaging/' -e 's/name: elastic/name: elastic-avg/' \
    -e 's/model: elastic.dtm/model: elastic-avg.dtm/' job.yaml > averaging.yaml
grep -q "mode: parameter_averaging" averaging.yaml || fail "averaging.yaml is not parameter averaging"
id=$("$SUBMIT" averaging.yaml --detach) || fail "detached submit"
wait_epoch "$id" 2 60  # on three nodes
"$DTRAIND" --config "$WORK/c/node-4.yaml" >> "$WORK/c/node-4.log" 2>&1 &
echo "$! node-4" >> "$WORK/c/pids"
state=$(wait_job_end "$id" avg.json 240)
"$SUBMIT" logs "$id" > avg.log
[[ $state == succeeded ]] ||
  { fail "averaging job $id ended '$state': $(json avg.json "j.get('error')")"; tail -n 20 avg.log; }
json avg.json "j['result']['joined_nodes']" | grep -q node-4 || {
  fail "node-4 did not join the averaging job: $(grep node-4 avg.log | tail -n 4)"
  echo "node-4's log:"; tail -n 15 "$WORK/c/node-4.log" | cut -c1-240; }
grep -q "node-1: epoch 1: .*minibatches of lost nodes or vacant slots" avg.log ||
  fail "averaging: in epoch 1 nobody did the vacant slot's minibatches"
grep "node-1: epoch 10: " avg.log | grep -q "minibatches of" &&
  fail "averaging: after node-4 joined, node-1 still did the vacant slot's minibatches"
grep -q "evaluation over 4 nodes" avg.log || fail "averaging: the evaluation was not over the 4 nodes"
check_trained avg.json "averaging: "
echo "averaging: node-4 $(grep -o "node-4: joined at epoch [0-9]*" avg.log | head -n 1 | cut -d' ' -f2-);" \
  "job $state, accuracy $acc, replicas of 4 nodes within $diff"
finish elastic_test
