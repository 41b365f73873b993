#!/usr/bin/env bash
# Convergence at scale (docs/architecture/core.md, "Staleness and corrections"): nine dtraind
# processes on loopback, one worker each, train the example MLP with the default settings in plain
# and in mesh mode and must come close to what one worker reaches in the same epochs (measured here
# first, with --local). Each of those jobs also checks, across processes:
# - exactly once: every node applied the same set of updates (count and digest of their ids)
#   and each replica equals its initial parameters minus the sum of the updates it applied;
# - bsp: the replicas agree at every epoch end (each node logs its replica's fingerprint);
# - no worker was ever more than one step ahead of another's applied messages.
# Then: `sync: {bounded: 2}` keeps every worker within 2 steps; a job made to diverge fails
# with the divergence message; a node SIGKILLed during a bsp job is dropped from the wait
# within the peer timeout and the job succeeds. Every wait has a deadline and says what it
# was waiting for.
set -u
SPEC="$(cd "$(dirname "$4")" && pwd)/$(basename "$4")"
# How far below the one-worker accuracy nine workers may end (points of accuracy). The issue
# asks for 0.5, and the default (the job's batch split over its workers) meets it.
TOLERANCE=${DTRAIN_SCALE_TOLERANCE:-0.5}
source "$(dirname "$0")/lib.sh" scale "$1" "$2" "$3"
export PEER_TIMEOUT_MS=3000 HEARTBEAT_MS=300
at_least() { python3 -c "import sys; sys.exit(0 if $1 >= $2 else 1)"; }

# The example with one worker per node and nothing else changed: the defaults are under test.
sed -e 's/workers_per_node: auto/workers_per_node: 1/' -e 's/checkpoint_every: 1000/checkpoint_every: 0/' \
    "$SPEC" > base.yaml

echo "== one worker (--local), the reference"
timeout 300 "$SUBMIT" --local base.yaml --output ref.dtm --quiet > ref.out 2>&1 ||
  { fail "the one-worker reference run exited $?"; tail -n 5 ref.out; }
"$SUBMIT" eval ref.dtm --json > ref.json || fail "eval of the reference model"
reference=$(json ref.json "j['accuracy']")
echo "one worker, 5 epochs: accuracy $reference"

"$CLUSTER_TOOL" start 9 "$WORK/c" > start.out || { echo "FAIL: the cluster did not start"; cat start.out; exit 1; }
source "$WORK/c/env"

run_job() {  # run_job SPEC NAME: submits, waits (300 s), leaves NAME.json and NAME.log
  timeout 300 "$SUBMIT" "$1" > "$2.out" 2> "$2.err"
  local rc=$?
  "$SUBMIT" status --json > all.json
  python3 -c "import json; j=json.load(open('all.json'))['jobs'][-1]; json.dump(j, open('$2.json', 'w'))"
  "$SUBMIT" logs "$(json "$2.json" "j['id']")" > "$2.log"
  return $rc
}

# Every node's epoch lines carry "replica NORM/PROJECTION": equal across nodes at every epoch.
check_epoch_replicas() {  # check_epoch_replicas LOG NODES
  python3 - "$1" "$2" <<'PY' || fail "replicas differ at an epoch end ($1)"
import re, sys
per_epoch = {}
for line in open(sys.argv[1]):
    m = re.search(r"(node-\d+): epoch (\d+): .*replica ([-0-9.e+]+)/([-0-9.e+]+)", line)
    if m:
        per_epoch.setdefault(int(m.group(2)), {})[m.group(1)] = (float(m.group(3)), float(m.group(4)))
ok = bool(per_epoch)
for epoch, nodes in sorted(per_epoch.items()):
    norms = [n for n, _ in nodes.values()]
    projections = [p for _, p in nodes.values()]
    spread = max(max(norms) - min(norms), (max(projections) - min(projections)) / 3) / max(norms)
    good = len(nodes) == int(sys.argv[2]) and spread <= 1e-5
    print("epoch %d: %d nodes, replicas within %.1e" % (epoch, len(nodes), spread))
    ok = ok and good
sys.exit(0 if ok else 1)
PY
}

for mesh in plain mesh; do
  echo "== 9 daemons x 1 worker, defaults, mesh $mesh"
  sed -e "s/  mesh: plain/  mesh: $mesh\n  audit_updates: true/" -e "s/name: fashion-mnist-mlp/name: scale-$mesh/" \
      base.yaml > "$mesh.yaml"
  run_job "$mesh.yaml" "$mesh" || { fail "$mesh: submit exited $?"; tail -n 20 "$mesh.err" "$mesh.log"; }
  [[ $(json "$mesh.json" "j['state']") == succeeded ]] ||
    fail "$mesh: state $(json "$mesh.json" "j['state']"): $(json "$mesh.json" "j.get('error')")"
  acc=$(json "$mesh.json" "j['result']['accuracy']")
  echo "accuracy $acc (one worker $reference), $(json "$mesh.json" "j['result']['train_seconds']") s of training"
  at_least "$acc" "$reference - $TOLERANCE / 100" ||
    fail "$mesh: accuracy $acc is more than $TOLERANCE points below one worker's $reference"
  # Exactly once, read from every node's own report.
  python3 - "$mesh.json" <<'PY' || fail "$mesh: the nodes did not apply the same updates exactly once"
import json, sys
r = json.load(open(sys.argv[1]))["result"]["applied_updates"]
sets = {(a["messages"], a["digest"]) for a in r.values()}
worst = max(a["deviation"] for a in r.values())
print("%d nodes applied %s updates each; replica vs initial - sum: %.1e" % (len(r), sorted(sets), worst))
sys.exit(0 if len(r) == 9 and len(sets) == 1 and worst <= 1e-4 else 1)
PY
  check_epoch_replicas "$mesh.log" 9
  grep -q "batch 64 over 9 workers (7 each, 63 a step)" "$mesh.log" ||
    fail "$mesh: the log does not say how the batch was split"
  ahead=$(json "$mesh.json" "j['result']['max_steps_ahead']")
  [[ $ahead -le 1 ]] || fail "$mesh: a worker was $ahead steps ahead under bsp"
done

echo "== sync: {bounded: 2}"
# Nine workers two steps stale at the example's learning rate diverge (see
# docs/performance.md, "Convergence at scale"): a lower one keeps this job about the bound.
sed -e 's/^  sync: bsp$/  sync: {bounded: 2}/' -e 's/epochs: 5/epochs: 2/' \
    -e 's/learning_rate: 0.05/learning_rate: 0.01/' \
    -e 's/name: fashion-mnist-mlp/name: scale-bounded/' base.yaml > bounded.yaml
grep -q "sync: {bounded: 2}" bounded.yaml || fail "bounded.yaml does not take sync: {bounded: 2}"
run_job bounded.yaml bounded || { fail "bounded: submit exited $?"; tail -n 5 bounded.err; }
[[ $(json bounded.json "j['state']") == succeeded ]] || fail "bounded: $(json bounded.json "j.get('error')")"
ahead=$(json bounded.json "j['result']['max_steps_ahead']")
echo "at most $ahead steps ahead"
[[ $ahead -le 2 && $ahead -ge 1 ]] || fail "bounded 2: a worker was $ahead steps ahead"

echo "== a job made to diverge (learning rate 50) fails, saying so; no daemon goes down"
# Gradient clipping (on by default) keeps even this learning rate in check: turned off here.
# (At 5 the job's batch of 64 ends near 0.67: bad, not diverged.)
sed -e 's/learning_rate: 0.05/learning_rate: 50/' -e 's/name: fashion-mnist-mlp/name: scale-diverge/' \
    -e 's/  mesh: plain/  mesh: plain\n  corrections: {clip_norm: 0}/' base.yaml > diverge.yaml
run_job diverge.yaml diverge
rc=$?
[[ $rc -eq 1 ]] || fail "diverge: dtrain-submit exited $rc, not 1 (job failed)"
[[ $(json diverge.json "j['state']") == failed ]] || fail "diverge: state $(json diverge.json "j['state']")"
error=$(json diverge.json "j.get('error')")
echo "error: $error; fix: $(json diverge.json "j.get('fix')")"
[[ $error == *"training diverged"* ]] || fail "diverge: the error does not say it diverged: $error"
[[ $(json diverge.json "j.get('fix')") == *"learning_rate"* ]] || fail "diverge: no fix"
sleep 2  # a daemon that went down with the job would have closed its control connection
"$SUBMIT" nodes --json > nodes.json
[[ $(json nodes.json "sum(n['state'] == 'alive' for n in j['nodes'])") == 9 ]] ||
  fail "a daemon went down with the failed job: $(json nodes.json "[n['name'] for n in j['nodes'] if n['state'] != 'alive']")"

echo "== a node SIGKILLed during a bsp job"
# Killed at epoch 2; two epochs more are room for the survivors to go on and finish.
sed -e 's/epochs: 5/epochs: 4/' -e 's/name: fashion-mnist-mlp/name: scale-kill/' base.yaml > kill.yaml
id=$("$SUBMIT" kill.yaml --detach) || fail "detached submit"
killed_at=""
for _ in $(seq 1 600); do  # 60 s for the job to reach its second epoch
  "$SUBMIT" status "$id" --json > kill.json 2> /dev/null
  if [[ $(json kill.json "max([p.get('epoch', 0) for p in j['progress'].values()] or [0])") -ge 2 ]]; then
    pid=$(awk '$2 == "node-5" { print $1 }' "$WORK/c/pids")
    kill -KILL "$pid"
    killed_at=$(date +%s.%N)
    echo "killed node-5 (pid $pid)"
    break
  fi
  sleep 0.1
done
[[ -n $killed_at ]] || fail "waited 60 s for job $id to reach epoch 2"
survivors() {  # iterations of every node but node-5, from a fresh status
  "$SUBMIT" status "$id" --json > kill.json 2> /dev/null
  json kill.json "sum(p.get('iteration', 0) for n, p in j['progress'].items() if n != 'node-5')"
}
# bsp: the survivors stop within a step of node-5's last message; once the mesh declares it
# lost (3 s) they go on. Progress is reported every 300 ms, so read it after they stopped.
sleep 1
before=$(survivors)
moved=""
for _ in $(seq 1 100); do  # the peer timeout and 7 s more
  if [[ $(survivors) -gt $((before + 16)) ]]; then  # two steps on each of 8 survivors
    moved=$(python3 -c "print('%.1f' % ($(date +%s.%N) - $killed_at))")
    break
  fi
  [[ $(json kill.json "j['state']") != running ]] && break
  sleep 0.1
done
[[ -n $moved ]] || fail "10 s after the kill the others had not gone on without node-5"
echo "the others went on without node-5 ${moved} s after the kill (peer timeout 3 s)"
state=""
for _ in $(seq 1 1200); do  # 120 s
  "$SUBMIT" status "$id" --json > kill.json 2> /dev/null
  state=$(json kill.json "j['state']")
  [[ $state == succeeded || $state == failed || $state == cancelled ]] && break
  sleep 0.1
done
if [[ $state != succeeded ]]; then
  fail "after losing node-5 the bsp job ended '$state': $(json kill.json "j.get('error')")"
  "$SUBMIT" logs "$id" | grep -E "epoch|lost|diverg|fail" | tail -n 40
fi
json kill.json "j['result']['lost_nodes']" | grep -q node-5 || fail "result.lost_nodes lacks node-5"
# The agreement is over the 8 nodes that finished, and says so.
[[ $(json kill.json "j['result'].get('replicas_compared')") == 8 ]] ||
  fail "replicas compared over $(json kill.json "j['result'].get('replicas_compared')") nodes, not the 8 survivors"

if [[ $failures -ne 0 ]]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all scale checks passed"
