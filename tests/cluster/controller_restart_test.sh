#!/usr/bin/env bash
# A controller SIGKILLed mid-job and restarted (docs/architecture/daemon.md, "Controller
# restart"): the job goes on. The nodes keep training while the controller is away, register
# again saying they still run the job, and the restarted controller adopts it: the job succeeds
# with its replicas agreeing, its log has every epoch of the nodes that kept training (training
# was not interrupted), and no node trains a job the controller lists as ended. node-1 holds the
# controller and a node, so its own part of the job dies with it: it is dropped, and offered
# the rejoin. Then the next job runs alone and succeeds. Every wait has a deadline and says what
# it was waiting for.
set -u
SPEC="$(cd "$(dirname "$4")" && pwd)/$(basename "$4")"
source "$(dirname "$0")/lib.sh" restart "$1" "$2" "$3"
export PEER_TIMEOUT_MS=3000 HEARTBEAT_MS=300
# The jobs a node's daemon is training now (its /status), as ids; "unreadable" when the status
# cannot be read, so that a silent node never passes for one that stopped.
node_jobs() {
  curl -s -m 5 "http://127.0.0.1:$(http_port "$1")/status" |
    python3 -c "import json,sys; print(' '.join(j['id'] for j in json.load(sys.stdin)['node']['jobs']) or 'none')" \
      2> /dev/null || echo unreadable
}

EPOCHS=20
sed -e 's/workers_per_node: auto/workers_per_node: 1/' -e 's/checkpoint_every: 1000/checkpoint_every: 0/' \
    -e "s/epochs: 5/epochs: $EPOCHS/" -e 's/  batch_size: 64/  batch_size_per_worker: 64/' \
    "$SPEC" > long.yaml
sed -e 's/workers_per_node: auto/workers_per_node: 1/' -e 's/checkpoint_every: 1000/checkpoint_every: 0/' \
    -e 's/epochs: 5/epochs: 1/' "$SPEC" > short.yaml

"$CLUSTER_TOOL" start 3 "$WORK/c" > start.out || { echo "FAIL: the cluster did not start"; cat start.out; exit 1; }
source "$WORK/c/env"

id=$("$SUBMIT" long.yaml --detach) || fail "detached submit"
trained=""
for _ in $(seq 1 300); do  # 30 s for node-2 and node-3 to be training it
  [[ $(node_jobs node-2) == *"$id"* && $(node_jobs node-3) == *"$id"* ]] && { trained=yes; break; }
  sleep 0.1
done
[[ -n $trained ]] || fail "waited 30 s for node-2 and node-3 to train job $id"

restart_daemon node-1 KILL  # the controller

answered job.json status "$id" --json || fail "the restarted controller did not answer within 10 s"
[[ $(json job.json "j['state']") == running ]] ||
  fail "job $id is '$(json job.json "j['state']")' after the restart, not running (adopted)"

state=$(wait_job_end "$id" job.json 180)
"$SUBMIT" logs "$id" > job.log
[[ $state == succeeded ]] ||
  { fail "after the controller's restart job $id ended '$state' (waited 180 s): $(json job.json "j.get('error')")"
    tail -n 20 job.log; }
grep -q "the controller restarted; the job goes on" job.log || fail "the log does not say the job went on"
for n in node-2 node-3; do
  grep -q "node $n still trains it: adopted" job.log || fail "$n was not adopted"
  grep -q "cancelling job $id" "$WORK/c/$n.log" && fail "$n was told to stop job $id"
  # Every epoch of a node that kept training is in the log: its reports waited for the
  # controller, and its training did not stop.
  for e in $(seq 1 $EPOCHS); do
    grep -q "$n: epoch $e:" job.log || { fail "the log lacks $n's epoch $e"; break; }
  done
done
diff=$(json job.json "j['result'].get('replica_max_relative_difference', 1)")
python3 -c "import sys; sys.exit(0 if $diff <= 1e-5 else 1)" || fail "replicas differ by $diff"
acc=$(json job.json "j['result'].get('accuracy', 0)")
python3 -c "import sys; sys.exit(0 if $acc >= 0.85 else 1)" || fail "accuracy $acc < 0.85"
grep -E "controller restarted|adopted|node-1" job.log | grep -v "epoch [0-9]*:" | cut -c1-150 | head -n 8
echo "job $state after the controller's restart: accuracy $acc, replicas within $diff"

stopped=""
for _ in $(seq 1 300); do  # 30 s: no node trains the job the controller lists as ended
  [[ $(node_jobs node-1) == none && $(node_jobs node-2) == none && $(node_jobs node-3) == none ]] &&
    { stopped=yes; break; }
  sleep 0.1
done
[[ -n $stopped ]] || fail "30 s after job $id ended node-1 trains '$(node_jobs node-1)', node-2 '$(node_jobs node-2)', node-3 '$(node_jobs node-3)'"

echo "== the next job runs alone"
timeout 300 "$SUBMIT" short.yaml > short.out 2>&1 || { fail "the next job exited $?"; tail -n 20 short.out; }

"$CLUSTER_TOOL" stop "$WORK/c" > /dev/null 2>&1
echo "controller restart test: $failures failures"
[[ $failures -eq 0 ]]
