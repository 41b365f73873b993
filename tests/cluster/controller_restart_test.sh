#!/usr/bin/env bash
# A controller SIGKILLed mid-job and restarted (issue 13, daemon/README.md, "Controller restart"):
# it marks the job it was running as failed ("the controller stopped while the job was running"),
# and the nodes that were still training it, when they register again, are told to stop: no node
# keeps training a job the controller lists as ended, and the next job runs alone and succeeds.
# Three daemons on loopback; node-1 holds the controller (and a node). Every wait has a deadline
# and says what it was waiting for.
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

sed -e 's/workers_per_node: auto/workers_per_node: 1/' -e 's/checkpoint_every: 1000/checkpoint_every: 0/' \
    -e 's/epochs: 5/epochs: 60/' "$SPEC" > long.yaml
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

pid=$(awk '$2 == "node-1" { print $1 }' "$WORK/c/pids")
kill -KILL "$pid"
echo "killed node-1, the controller (pid $pid)"
sleep 1
"$DTRAIND" --config "$WORK/c/node-1.yaml" >> "$WORK/c/node-1.log" 2>&1 &
sed -i "/ node-1\$/d" "$WORK/c/pids"
echo "$! node-1" >> "$WORK/c/pids"
echo "restarted node-1 (pid $!)"

answered=""
for _ in $(seq 1 100); do  # 10 s for the restarted controller to answer
  "$SUBMIT" status "$id" --json > job.json 2> /dev/null && { answered=yes; break; }
  sleep 0.1
done
[[ -n $answered ]] || fail "the restarted controller did not answer within 10 s"
[[ $(json job.json "j['state']") == failed ]] || fail "job $id is '$(json job.json "j['state']")' after the restart"
json job.json "j.get('error')" | grep -q "controller stopped while the job was running" ||
  fail "the job's error does not say the controller stopped: $(json job.json "j.get('error')")"

stopped=""
for _ in $(seq 1 300); do  # 30 s for the nodes to re-register and be told to stop
  [[ $(node_jobs node-2) == none && $(node_jobs node-3) == none ]] && { stopped=yes; break; }
  sleep 0.1
done
[[ -n $stopped ]] || fail "30 s after the restart node-2 trains '$(node_jobs node-2)', node-3 '$(node_jobs node-3)' (job $id ended)"
grep -q "cancelling job $id" "$WORK/c/node-2.log" || fail "node-2's log does not say it stopped job $id"
"$SUBMIT" logs "$id" | grep -q "was still training it; told it to stop" ||
  fail "the job's log does not record the orphans being stopped"

echo "== the next job runs alone"
timeout 300 "$SUBMIT" short.yaml > short.out 2>&1 || { fail "the next job exited $?"; tail -n 20 short.out; }

"$CLUSTER_TOOL" stop "$WORK/c" > /dev/null 2>&1
echo "controller restart test: $failures failures"
[[ $failures -eq 0 ]]
