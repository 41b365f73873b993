#!/usr/bin/env bash
# Exactly once under faults, in real daemons (docs/architecture/core.md, "Checks"): five daemons
# whose data channels drop 5%, duplicate 1% and reorder 1% of their datagrams (data.faults,
# seeded) train the MLP example with the update audit on. Every node ends with the same count
# and digest of applied updates, each replica within 1e-4 of its initial parameters minus the
# updates it applied, and the replicas agree. Then node-5 is lost mid-job (SIGKILL) and restarted:
# the survivors do its minibatches (a takeover) and it rejoins with a live node's parameters and
# that node's audit totals, so its digest is compared too, still under loss. (node-5 ends itself
# a third of the way into epoch 3, DTRAIN_TEST_FAULT: the 2-epoch first job never gets there, the
# 6-epoch second one does at a known point.) Every wait has a deadline and says what it waited
# for.
set -u
SPEC="$(cd "$(dirname "$4")" && pwd)/$(basename "$4")"
source "$(dirname "$0")/lib.sh" exactly_once "$1" "$2" "$3"
export PEER_TIMEOUT_MS=3000 HEARTBEAT_MS=300
export FAULTS="drop: 0.05, duplicate: 0.01, reorder: 0.01"
export NODE_ENV_5="DTRAIN_TEST_FAULT=exit_in_epoch:3"

# audited_alike FILE NODES: the job in status JSON FILE succeeded with NODES nodes' applied
# updates, all one (count, digest), every deviation below 1e-4, and replicas within 1e-5.
audited_alike() {
  python3 - "$1" "$2" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); want = int(sys.argv[2]); r = j.get("result", {})
applied = r.get("applied_updates", {})
sets = {(a["messages"], a["digest"]) for a in applied.values()}
worst = max([a.get("deviation", -1) for a in applied.values()] or [1])
print("state %s, %d nodes audited: %s, largest deviation %g, replicas within %s" %
      (j["state"], len(applied), sorted(sets), worst, r.get("replica_max_relative_difference")))
ok = (j["state"] == "succeeded" and len(applied) == want and len(sets) == 1 and
      0 <= worst <= 1e-4 and r.get("replica_max_relative_difference", 1) <= 1e-5)
sys.exit(0 if ok else 1)
PY
}

"$CLUSTER_TOOL" start 5 "$WORK/c" > start.out || { echo "FAIL: the cluster did not start"; cat start.out; exit 1; }
source "$WORK/c/env"
grep -q "data.faults is on: this node drops 5.0%" "$WORK/c/node-3.log" ||
  fail "node-3 does not say its data channel drops datagrams on purpose"
sed -e 's/epochs: 5/epochs: 2/' -e 's/name: fashion-mnist-mlp/name: exactly-once/' \
    -e 's/  batch_size: 64/  batch_size_per_worker: 64/' \
    -e 's/  mesh: plain/  mesh: plain\n  audit_updates: true/' \
    -e 's/model: fashion-mnist-mlp.dtm/model: exactly-once.dtm/' "$SPEC" > job.yaml
grep -q "audit_updates: true" job.yaml || fail "job.yaml lacks audit_updates"

echo "== five nodes under 5% loss, 1% duplication, 1% reordering"
id=$("$SUBMIT" job.yaml --detach) || fail "detached submit"
state=$(wait_job_end "$id" job.json 240)
[[ $state == succeeded ]] || { fail "job $id ended '$state' (waited 240 s)"; "$SUBMIT" logs "$id" | tail -n 20; }
audited_alike job.json 5 || fail "the five nodes did not apply one set of updates exactly once"
injected=0
for i in 1 2 3 4 5; do
  fetch "http://127.0.0.1:$(http_port node-$i)/status" > status-$i.json || fail "GET node-$i /status"
  n=$(json status-$i.json "sum(p.get('drops', {}).get('injected', 0) for p in j['node']['peers'])")
  injected=$((injected + n))
done
echo "datagrams dropped on purpose across the nodes: $injected"
[[ $injected -gt 100 ]] || fail "only $injected datagrams were dropped on purpose: the faults did not run"

echo "== under loss, node-5 SIGKILLed mid-job and restarted: takeover, rejoin, audit"
sed -e 's/epochs: 2/epochs: 6/' -e 's/exactly-once/exactly-once-rejoin/g' job.yaml > rejoin.yaml
id=$("$SUBMIT" rejoin.yaml --detach) || fail "detached submit of the rejoin job"
# A third of the way into epoch 3 of 6 node-5 ends itself (NODE_ENV_5): it leaves minibatches to
# take over and epoch ends to rejoin at.
if await_fault_exit node-5 180; then
  lose_and_restart node-5 "$id" rejoin.json
  state=$(wait_job_end "$id" rejoin.json 300)
  "$SUBMIT" logs "$id" > rejoin.log
  [[ $state == succeeded ]] || { fail "the rejoin job ended '$state' (waited 300 s)"; tail -n 20 rejoin.log; }
  grep -q "minibatches of lost nodes" rejoin.log || fail "no survivor did node-5's minibatches"
  grep -q "node-5: rejoined at epoch" rejoin.log || fail "node-5 did not rejoin: $(grep node-5 rejoin.log | tail -n 3)"
  audited_alike rejoin.json 5 ||
    fail "after the takeover and the rejoin the nodes did not apply one set of updates"
fi
"$CLUSTER_TOOL" stop "$WORK/c" > /dev/null 2>&1
finish exactly_once_test
