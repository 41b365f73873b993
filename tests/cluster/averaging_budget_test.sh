#!/usr/bin/env bash
# A chunk refused by reassembly is sent again, not lost (docs/architecture/transport.md, "The data
# channel"): three daemons whose reassembly budget (data.reassembly_mb: 1) holds one node's
# parameters (0.9 MB, the example MLP) but not the two that arrive each averaging round. Parameter
# averaging must still end with identical replicas, and the nodes' /metrics must show that chunks
# were refused for room (no_room), i.e. that the budget was really exceeded and the retransmission
# really used.
set -u
SPEC="$(cd "$(dirname "$4")" && pwd)/$(basename "$4")"  # before lib.sh changes directory
source "$(dirname "$0")/lib.sh" averaging_budget "$1" "$2" "$3"
export PEER_TIMEOUT_MS=5000 HEARTBEAT_MS=300 REASSEMBLY_MB=1

"$CLUSTER_TOOL" start 3 "$WORK/c" || { echo "FAIL: the cluster did not start"; exit 1; }
source "$WORK/c/env"
grep -q "reassembly_mb: 1" "$WORK/c/node-1.yaml" || fail "the daemons' budget is not 1 MB"

sed -e 's/mode: gradient_sharing/mode: parameter_averaging/' -e 's/epochs: 5/epochs: 1/' \
    -e 's/name: fashion-mnist-mlp/name: averaging-budget/' \
    -e 's/model: fashion-mnist-mlp.dtm/model: averaging-budget.dtm/' "$SPEC" > job.yaml
grep -q "mode: parameter_averaging" job.yaml || fail "job.yaml is not parameter averaging"

echo "== parameter averaging on 3 nodes through a 1 MB reassembly budget"
timeout 600 "$SUBMIT" job.yaml > submit.out 2> submit.err
rc=$?
tail -n 4 submit.out
[[ $rc -eq 0 ]] || { fail "submit exited $rc"; cat submit.err; tail -n 20 "$WORK"/c/node-*.log; }
"$SUBMIT" status --json > jobs.json || fail "status --json"
[[ $(json jobs.json "j['jobs'][-1]['state']") == succeeded ]] ||
  fail "the job ended $(json jobs.json "j['jobs'][-1]['state']"): $(json jobs.json "j['jobs'][-1]['error']")"
diff=$(json jobs.json "j['jobs'][-1]['result']['replica_max_relative_difference']")
[[ $diff == 0 || $diff == 0.0 ]] || fail "replicas differ by $diff (averaging gives every node the same floats)"
echo "replicas differ by $diff"

no_room=0
for i in 1 2 3; do
  fetch "http://127.0.0.1:$(http_port node-$i)/metrics" > metrics-$i.txt || fail "GET /metrics of node-$i"
  n=$(python3 - "metrics-$i.txt" <<'PY'
import re, sys
total = 0
for line in open(sys.argv[1]):
    if line.startswith("dtrain_transport_drops_total") and 'reason="no_room"' in line:
        total += int(float(line.split()[-1]))
print(total)
PY
)
  echo "node-$i: $n chunks refused for room, later taken"
  no_room=$((no_room + n))
done
[[ $no_room -gt 0 ]] || fail "no chunk was refused for room: the test did not exceed the budget"
finish averaging_budget_test
