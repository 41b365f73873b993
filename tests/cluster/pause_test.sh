#!/usr/bin/env bash
# A node paused for longer than the peer timeout (SIGSTOP, then SIGCONT: a VM migration or a
# long stall looks the same) must not kill a healthy job (docs/architecture/daemon.md, "Lost and
# restarted members"). While it is away the others drop it (gradient sharing covers its minibatches,
# parameter averaging leaves it out of its rounds); when it is back, either mode takes it back with
# a live replica at the next epoch end. The job succeeds, the replicas of every node, the paused one
# included, agree, and the paused node trains nothing afterwards that nobody asked for. Last, a
# parameter-averaging job takes back a node SIGKILLed and restarted (a new process): its replica
# agrees at the end.
set -u
SPEC="$(cd "$(dirname "$4")" && pwd)/$(basename "$4")"  # before lib.sh changes directory
source "$(dirname "$0")/lib.sh" pause "$1" "$2" "$3"
export PEER_TIMEOUT_MS=2000 HEARTBEAT_MS=300
PAUSE_S=3  # 1.5x the peer timeout

"$CLUSTER_TOOL" start 3 "$WORK/c" || { echo "FAIL: the cluster did not start"; exit 1; }
source "$WORK/c/env"
victim=node-3  # not the controller (node-1)
pid=$(awk -v n="$victim" '$2 == n { print $1 }' "$WORK/c/pids")

job_state() { json "$1" "j['state']"; }
# pause_victim ID: SIGSTOP for PAUSE_S seconds at least, and until the controller names it
# lost (a loaded machine may take the controller a little past the timeout; 12 s more at most).
pause_victim() {
  kill -STOP "$pid"
  echo "paused $victim (pid $pid) for $PAUSE_S s or more"
  sleep "$PAUSE_S"
  for _ in $(seq 1 120); do
    "$SUBMIT" status "$1" --json > paused.json 2> /dev/null
    json paused.json "j['lost_nodes']" | grep -q "$victim" && break
    sleep 0.1
  done
  json paused.json "j['lost_nodes']" | grep -q "$victim" ||
    fail "$((PAUSE_S + 12)) s after the pause the job does not name $victim as lost: $(json paused.json "j['lost_nodes']")"
  kill -CONT "$pid"
  echo "resumed $victim"
}
# check_end ID FILE MODE: succeeded, replicas agree; the log lines about the victim shown.
check_end() {
  "$SUBMIT" logs "$1" > "$1.log"
  [[ $(job_state "$2") == succeeded ]] ||
    { fail "$3: after pausing $victim the job ended '$(job_state "$2")': $(json "$2" "j.get('error')")"
      tail -n 15 "$1.log"; }
  grep -E "$victim|lost|rejoin|dropped" "$1.log" | cut -c1-160 | head -n 8
  local diff
  diff=$(json "$2" "j['result']['replica_max_relative_difference']" 2> /dev/null)
  python3 -c "import sys; sys.exit(0 if ${diff:-1} <= 1e-5 else 1)" ||
    fail "$3: replicas differ by ${diff:-?}"
  echo "$3: job $(job_state "$2"), replicas within ${diff:-?}," \
    "accuracy $(json "$2" "j['result'].get('accuracy')")"
}

# check_taken_back ID FILE: the victim is back in the job, and its replica in the evaluation.
check_taken_back() {
  json "$2" "j['result']['rejoined_nodes']" | grep -q "$victim" ||
    fail "$victim was not taken back: $(grep "$victim" "$1.log" | tail -n 4)"
  grep -q "evaluation over 3 nodes" "$1.log" || fail "the taken-back node's replica was not in the end"
}

sed -e 's/epochs: 5/epochs: 12/' -e 's/name: fashion-mnist-mlp/name: pause-test/' \
    -e 's/  batch_size: 64/  batch_size_per_worker: 64/' \
    -e 's/model: fashion-mnist-mlp.dtm/model: pause-test.dtm/' "$SPEC" > sharing.yaml

echo "== gradient sharing: $victim paused for 1.5x the peer timeout is taken back"
id=$("$SUBMIT" sharing.yaml --detach) || fail "detached submit"
if wait_epoch "$id" 2 60; then
  pause_victim "$id"
  wait_job_end "$id" sharing.json 180 > /dev/null
  check_end "$id" sharing.json "gradient sharing"
  check_taken_back "$id" sharing.json
fi

echo "== parameter averaging: $victim paused for 1.5x the peer timeout is taken back"
sed -e 's/mode: gradient_sharing/mode: parameter_averaging/' -e 's/name: pause-test/name: pause-avg/' \
    -e 's/model: pause-test.dtm/model: pause-avg.dtm/' sharing.yaml > averaging.yaml
grep -q "mode: parameter_averaging" averaging.yaml || fail "averaging.yaml is not parameter averaging"
id=$("$SUBMIT" averaging.yaml --detach) || fail "detached submit"
if wait_epoch "$id" 2 60; then
  pause_victim "$id"
  wait_job_end "$id" averaging.json 180 > /dev/null
  check_end "$id" averaging.json "parameter averaging"
  check_taken_back "$id" averaging.json
fi
echo "== parameter averaging: $victim SIGKILLed and restarted rejoins"
sed -e 's/name: pause-avg/name: kill-avg/' -e 's/model: pause-avg.dtm/model: kill-avg.dtm/' \
    averaging.yaml > killed.yaml
id=$("$SUBMIT" killed.yaml --detach) || fail "detached submit"
if wait_epoch "$id" 2 60; then
  kill -KILL "$pid"
  echo "killed $victim (pid $pid)"
  lost=""
  for _ in $(seq 1 100); do  # 10 s for the controller to see it gone
    "$SUBMIT" status "$id" --json > killed.json 2> /dev/null
    json killed.json "j['lost_nodes']" | grep -q "$victim" && lost=yes && break
    sleep 0.1
  done
  [[ -n $lost ]] || fail "the job does not name $victim as lost within 10 s of its SIGKILL"
  "$DTRAIND" --config "$WORK/c/$victim.yaml" >> "$WORK/c/$victim.log" 2>&1 &
  pid=$!
  sed -i "/ $victim\$/d" "$WORK/c/pids"
  echo "$pid $victim" >> "$WORK/c/pids"
  echo "restarted $victim (pid $pid)"
  wait_job_end "$id" killed.json 180 > /dev/null
  check_end "$id" killed.json "parameter averaging, killed"
  check_taken_back "$id" killed.json
  grep -q "$victim: rejoined at epoch" "$id.log" || fail "the log does not say when $victim rejoined"
fi
# Whatever happened, the paused node is not still training either job.
sleep 1
"$SUBMIT" nodes --json > nodes.json
[[ $(json nodes.json "sum(n['state'] == 'alive' for n in j['nodes'])") == 3 ]] ||
  fail "not every node is alive again: $(json nodes.json "[(n['name'], n['state']) for n in j['nodes']]")"
fetch "http://127.0.0.1:$(http_port $victim)/status" > victim-status.json ||
  fail "GET /status of $victim"
running=$(json victim-status.json "[x['id'] for x in j['node']['jobs']]")
[[ -z $running || $running == "[]" ]] || fail "$victim still runs $running"
finish pause_test
