#!/usr/bin/env bash
# GPU and CPU nodes in one cluster (docs/architecture/daemon.md, "The controller"): three daemons on
# this machine, node-1 with GPUs (emulated ones here: DTRAIN_EMULATED_GPUS, CPU arithmetic behind
# device-memory discipline; on a GPU machine with a --config=cuda build set REAL_GPUS=1 to use the
# real one), node-2 and node-3 with `gpus: none`.
# - `dtrain-submit nodes --json` lists node-1's GPU (index, name, memory) and none elsewhere;
#   the table shows it; node-1's /metrics has its memory;
# - `device: auto`: node-1 trains on its GPU, the others on their CPUs, sharing the same
#   messages; the job succeeds, its replicas agree across devices within 1e-5 and every node
#   applied the same updates exactly once;
# - `device: gpu` on all three nodes is refused at submit, naming the nodes without a GPU and
#   the fix; on one node it runs there, on the GPU, and its one GPU worker forms no device
#   group (its log says nothing of sharing between GPUs);
# - `--local` with `device: gpu` on a machine without a GPU is refused with the fix, and
#   dtraind refuses to start with a GPU in `gpus:` that the machine lacks.
# Every wait has a deadline and says what it was waiting for.
set -u
SPEC="$(cd "$(dirname "$4")" && pwd)/$(basename "$4")"
source "$(dirname "$0")/lib.sh" gpu "$1" "$2" "$3"
export PEER_TIMEOUT_MS=3000 HEARTBEAT_MS=300 GPU_NODES=1
[[ ${REAL_GPUS:-0} == 1 ]] || export EMULATED_GPUS=1

# Two epochs of the example, one worker per node (one per GPU on node-1 under auto).
sed -e 's/workers_per_node: auto/workers_per_node: 1/' -e 's/checkpoint_every: 1000/checkpoint_every: 0/' \
    -e 's/epochs: 5/epochs: 2/' -e 's/  mesh: plain/  mesh: plain\n  audit_updates: true/' \
    "$SPEC" > auto.yaml
sed -e 's/  mesh: plain/  mesh: plain\n  device: gpu/' auto.yaml > gpu_all.yaml
sed -e 's/  mesh: plain/  mesh: plain\n  device: gpu\n  nodes: 1/' -e 's/  nodes: all//' auto.yaml > gpu_one.yaml

echo "== --local, device: gpu, no GPU in this process"
# CUDA_VISIBLE_DEVICES= hides a real GPU too (REAL_GPUS=1).
DTRAIN_EMULATED_GPUS= CUDA_VISIBLE_DEVICES= timeout 60 "$SUBMIT" --local gpu_all.yaml --quiet > local.out 2>&1
rc=$?
[[ $rc -eq 2 ]] || fail "--local with device: gpu and no GPU exited $rc (expected 2, bad input)"
grep -q "training.device is gpu, but this machine offers no GPU" local.out &&
  grep -q "fix: use training.device: auto" local.out || { fail "--local refusal message"; cat local.out; }

echo "== dtraind refuses a GPU its dtraind.yaml lists but the machine lacks"
"$DTRAIND" keygen "$WORK/k" > /dev/null
printf 'name: g\nroles: [node]\ndata_dir: %s/gd\nkey_file: %s/k\ndata: {interface: lo, port: 0}\nhttp: {address: 127.0.0.1, port: 0}\ngpus: [7]\n' \
  "$WORK" "$WORK" > gpu7.yaml
DTRAIN_EMULATED_GPUS=1 timeout 20 "$DTRAIND" --config gpu7.yaml > gpu7.out 2>&1
rc=$?
[[ $rc -eq 2 ]] || fail "dtraind with gpus: [7] exited $rc (expected 2)"
grep -q "gpus lists GPU 7, but this node has GPUs 0: " gpu7.out && grep -q "fix: list only GPUs that exist" gpu7.out ||
  { fail "dtraind's refusal of gpus: [7]"; cat gpu7.out; }

"$CLUSTER_TOOL" start 3 "$WORK/c" > start.out || { echo "FAIL: the cluster did not start"; cat start.out; exit 1; }
source "$WORK/c/env"

echo "== nodes: node-1 offers its GPU, the others none"
"$SUBMIT" nodes --json > nodes.json || fail "nodes --json"
python3 - nodes.json <<'PY' || fail "nodes --json does not show the GPUs as configured"
import json, sys
nodes = {n["name"]: n for n in json.load(open(sys.argv[1]))["nodes"]}
g = nodes["node-1"]["gpus"]
print("node-1 gpus:", g)
ok = len(g) == 1 and g[0]["index"] == 0 and g[0]["name"] and g[0]["memory_bytes"] > 0
ok = ok and nodes["node-2"]["gpus"] == [] and nodes["node-3"]["gpus"] == []
sys.exit(0 if ok else 1)
PY
"$SUBMIT" nodes > nodes.txt
grep -E "^node-1 .* 1 x " nodes.txt > /dev/null && grep -E "^node-2 .* - " nodes.txt > /dev/null ||
  { fail "the nodes table does not show the GPU column"; cat nodes.txt; }
http1=$(sed -nE 's/^http: \{address: 127.0.0.1, port: ([0-9]+)\}/\1/p' "$WORK/c/node-1.yaml")
curl -s "http://127.0.0.1:$http1/metrics" > metrics1.txt
grep -qE '^dtrain_gpu_memory_bytes\{gpu="0",.*node="node-1"\} [0-9]+' metrics1.txt ||
  { fail "node-1's /metrics has no dtrain_gpu_memory_bytes"; grep gpu metrics1.txt; }

run_job() {  # run_job SPEC NAME: submits, waits (300 s), leaves NAME.json and NAME.log
  timeout 300 "$SUBMIT" "$1" > "$2.out" 2> "$2.err"
  local rc=$?
  "$SUBMIT" status --json > all.json
  python3 -c "import json; j=json.load(open('all.json'))['jobs'][-1]; json.dump(j, open('$2.json', 'w'))"
  "$SUBMIT" logs "$(json "$2.json" "j['id']")" > "$2.log"
  return $rc
}

echo "== device: auto, one GPU node and two CPU nodes"
run_job auto.yaml auto || { fail "auto: submit exited $?"; tail -n 20 auto.err auto.log; }
[[ $(json auto.json "j['state']") == succeeded ]] ||
  fail "auto: state $(json auto.json "j['state']"): $(json auto.json "j.get('error')")"
python3 - auto.json <<'PY' || fail "auto: devices, replicas or exactly-once across devices"
import json, sys
r = json.load(open(sys.argv[1]))["result"]
devices, diff = r["devices"], r["replica_max_relative_difference"]
sets = {(a["messages"], a["digest"]) for a in r["applied_updates"].values()}
print("devices:", devices, "replicas within %.1e," % diff, "applied:", sorted(sets),
      "accuracy %.4f" % r["accuracy"])
ok = devices == {"node-1": "gpu 0", "node-2": "cpu", "node-3": "cpu"}
ok = ok and diff <= 1e-5 and len(sets) == 1 and r["accuracy"] >= 0.84
sys.exit(0 if ok else 1)
PY

echo "== device: gpu on every node: refused at submit"
timeout 60 "$SUBMIT" gpu_all.yaml > gpu_all.out 2>&1
rc=$?
[[ $rc -ne 0 ]] || fail "device: gpu on nodes without a GPU was accepted"
grep -q "1 of the 3 registered nodes have a GPU (without: node-2, node-3)" gpu_all.out &&
  grep -q "training.nodes to at most 1" gpu_all.out || { fail "the refusal does not say why and what to do"; cat gpu_all.out; }

echo "== device: gpu, nodes: 1: on node-1's GPU"
run_job gpu_one.yaml gpu_one || { fail "gpu_one: submit exited $?"; tail -n 20 gpu_one.err gpu_one.log; }
[[ $(json gpu_one.json "j['state']") == succeeded ]] ||
  fail "gpu_one: state $(json gpu_one.json "j['state']"): $(json gpu_one.json "j.get('error')")"
[[ $(json gpu_one.json "j['result']['devices']") == "{'node-1': 'gpu 0'}" ]] ||
  fail "gpu_one ran on $(json gpu_one.json "j['result']['devices']")"
# Its one GPU worker has no other GPU to share with: it forms no device group (no NCCL start-up
# in a single-GPU job), and the job log claims none.
grep -q "job succeeded" gpu_one.log || fail "gpu_one's log is not the whole job log: $(tail -n 3 gpu_one.log)"
if grep -q "sharing between this node's GPU workers" gpu_one.log; then
  fail "gpu_one formed a device group for one GPU worker"; grep -i sharing gpu_one.log
fi

"$CLUSTER_TOOL" stop "$WORK/c" > /dev/null 2>&1
echo "gpu cluster test: $failures failures"
[[ $failures -eq 0 ]]
