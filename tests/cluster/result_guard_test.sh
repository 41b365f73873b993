#!/usr/bin/env bash
# The controller's result guard, shown to fail a job (daemon/controller/result_checks.h): three
# daemons train the MLP example with the update audit on; node-2's lead worker applies the 40th
# update it receives twice (DTRAIN_TEST_FAULT=apply_twice:40, core/train/test_fault.h). The job
# must end failed, naming node-2 as the node that applied an update twice or lost one, not
# succeed with a replica the others lack. Every wait has a deadline.
set -u
SPEC="$(cd "$(dirname "$4")" && pwd)/$(basename "$4")"
source "$(dirname "$0")/lib.sh" result_guard "$1" "$2" "$3"
export PEER_TIMEOUT_MS=3000 HEARTBEAT_MS=300 NODE_ENV_2="DTRAIN_TEST_FAULT=apply_twice:40"

"$CLUSTER_TOOL" start 3 "$WORK/c" > start.out || { echo "FAIL: the cluster did not start"; cat start.out; exit 1; }
source "$WORK/c/env"
grep -q "DTRAIN_TEST_FAULT is set: this node's lead worker applies received message 40 twice" \
  "$WORK/c/node-2.log" || fail "node-2 does not warn that it applies an update twice on purpose"
grep -q "DTRAIN_TEST_FAULT" "$WORK/c/node-1.log" && fail "node-1 has the test fault too"
sed -e 's/epochs: 5/epochs: 1/' -e 's/name: fashion-mnist-mlp/name: guarded/' \
    -e 's/  batch_size: 64/  batch_size_per_worker: 64/' \
    -e 's/model: fashion-mnist-mlp.dtm/model: guarded.dtm/' "$SPEC" > job.yaml
"$SUBMIT" job.yaml > submit.out 2> submit.err
rc=$?
[[ $rc -eq 1 ]] || fail "dtrain-submit exited $rc, not 1 (a failed job): $(tail -n 3 submit.out)"
"$SUBMIT" status --json > jobs.json
error=$(json jobs.json "j['jobs'][-1]['error']")
echo "the job's error: $error"
[[ $(json jobs.json "j['jobs'][-1]['state']") == failed ]] || fail "the job did not fail"
[[ $error == "node-2 applied "*", the other 2 nodes "*": node-2 lost an update or applied one twice" ]] ||
  fail "the error does not name node-2 as the odd one: $error"
"$CLUSTER_TOOL" stop "$WORK/c" > /dev/null 2>&1
finish result_guard_test
