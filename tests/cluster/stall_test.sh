#!/usr/bin/env bash
# Stall reports (docs/architecture/daemon.md, "Stall reports"): node-3 is stopped (SIGSTOP) mid-
# epoch; the others reach the epoch's end and wait for it. Within the stall threshold (a fifth of
# the peer timeout, here 2 s) of that wait the job's log names node-3, how long the barrier has
# waited, and what was last heard from it, well before node-3 would be declared lost. Then
# node-3 goes on (SIGCONT) and the job succeeds. Every wait has a deadline.
set -u
SPEC="$(cd "$(dirname "$4")" && pwd)/$(basename "$4")"
source "$(dirname "$0")/lib.sh" stall "$1" "$2" "$3"
export PEER_TIMEOUT_MS=10000 HEARTBEAT_MS=300
THRESHOLD_S=2  # peer_timeout_ms / 5

sed -e 's/workers_per_node: auto/workers_per_node: 1/' -e 's/epochs: 5/epochs: 3/' \
    -e 's/checkpoint_every: 1000/checkpoint_every: 0/' "$SPEC" > job.yaml
"$CLUSTER_TOOL" start 3 "$WORK/c" > start.out || { echo "FAIL: the cluster did not start"; cat start.out; exit 1; }
source "$WORK/c/env"
id=$("$SUBMIT" job.yaml --detach) || fail "detached submit"
wait_epoch "$id" 1 60 || exit 1
# Epoch 1 is reported after any node's first step; node-3 must have trained (and sent) some
# updates itself before it stops, or the report can only say nothing was heard from it.
for _ in $(seq 1 300); do
  "$SUBMIT" status "$id" --json > progress.json 2> /dev/null
  it=$(json progress.json "j['progress'].get('node-3', {}).get('iteration', 0)" 2> /dev/null)
  [[ ${it:-0} -ge 5 ]] && break
  sleep 0.1
done
[[ ${it:-0} -ge 5 ]] || fail "node-3 reported no 5 iterations within 30 s (at '${it:-none}')"
pid=$(awk '$2 == "node-3" { print $1 }' "$WORK/c/pids")
kill -STOP "$pid"
stopped=$(date +%s.%N)
echo "stopped node-3 (pid $pid) in epoch $epoch"

# The others finish the epoch (at most one epoch, a few seconds) and wait THRESHOLD_S more.
line=""
for _ in $(seq 1 150); do  # 15 s, still before the 10 s peer timeout counts node-3 lost... or
  "$SUBMIT" logs "$id" > job.log 2> /dev/null  # ...just after: the report must come first
  line=$(grep -m1 "stalled:.*node-3" job.log)
  [[ -n $line ]] && break
  sleep 0.1
done
seen=$(date +%s.%N)
kill -CONT "$pid"
if [[ -z $line ]]; then
  fail "no stall report naming node-3 within 15 s of stopping it; the log ends: $(tail -n 5 job.log)"
  echo "what the daemons logged about the wait and node-3:"
  grep -h "stalled\|lost\|node-3\|waited" "$WORK"/c/node-*.log | tail -n 20
fi
echo "$line" | cut -c1-220
after=$(python3 -c "print(round($seen - $stopped, 1))")
echo "reported $after s after node-3 stopped"
# It names who, how long the barrier has waited (the threshold: it is the first report), and
# what was last heard from node-3; and it came before node-3 was declared lost.
waited=$(sed -nE 's/.* has waited ([0-9.]+) s .*/\1/p' <<<"$line")
python3 -c "import sys; sys.exit(0 if ${waited:-99} <= $THRESHOLD_S + 1 else 1)" ||
  fail "the first stall report came after ${waited:-?} s of waiting, not within the ${THRESHOLD_S} s threshold"
grep -q "last heard .* ago: an update of epoch [0-9]*, minibatch [0-9]*\|last heard .* ago: the end of its epoch" <<<"$line" ||
  fail "the report does not say what was last heard from node-3"
grep -q "node-3.*declared lost\|lost node-3\|node-3 lost" <(head -n "$(grep -n -m1 "stalled:.*node-3" job.log | cut -d: -f1)" job.log) &&
  fail "node-3 was declared lost before the stall report"

state=$(wait_job_end "$id" job.json 180)
[[ $state == succeeded ]] || fail "after node-3 went on, job $id ended '$state': $(json job.json "j.get('error')")"
echo "job $state"
finish stall
