#!/usr/bin/env bash
# 30,000 hostile datagrams at the nodes of a running job (docs/architecture/transport.md, "The data
# channel"): random, truncated, bit-flipped, replayed to the node they were for, replayed at another
# node, and claiming the old wire version (tests/cluster/hostile_datagrams.py captures the job's own
# datagrams on lo).
# - the job succeeds, its replicas agree and every node applied the same updates exactly once;
# - each node's /metrics answers 200 throughout;
# - the refusals are counted under their reasons: replays at another node as wrong_receiver,
#   replays as replayed, forgeries as bad_tag, old versions as wrong_version.
# Three daemons on loopback, each with one tag worker. Needs root to capture (reported as
# skipped otherwise). Every wait has a deadline and says what it was waiting for.
set -u
SPEC="$(cd "$(dirname "$4")" && pwd)/$(basename "$4")"
ATTACKER="$(cd "$(dirname "$5")" && pwd)/$(basename "$5")"
source "$(dirname "$0")/lib.sh" hostile "$1" "$2" "$3"
export PEER_TIMEOUT_MS=3000 HEARTBEAT_MS=300
# Node tags are checked on a tag worker too (data.tag_threads, transport/endpoint/tag_workers.h):
# forged, flipped and replayed datagrams under keys the nodes have cached meet those checks.
export TAG_THREADS=1
port_of() { sed -nE "s/^$2: \{.*[{ ]port: ([0-9]+)[,}].*/\1/p" "$WORK/c/$1.yaml"; }  # port_of NODE data|http

if ! python3 -c 'import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW)' 2> /dev/null; then
  echo "SKIPPED: capturing the job's datagrams on lo needs root (CAP_NET_RAW)"
  exit 0
fi

sed -e 's/workers_per_node: auto/workers_per_node: 1/' -e 's/checkpoint_every: 1000/checkpoint_every: 0/' \
    -e 's/epochs: 5/epochs: 9/' -e 's/  mesh: plain/  mesh: plain\n  audit_updates: true/' \
    "$SPEC" > job.yaml
"$CLUSTER_TOOL" start 3 "$WORK/c" > start.out || { echo "FAIL: the cluster did not start"; cat start.out; exit 1; }
source "$WORK/c/env"
ports=$(port_of node-1 data),$(port_of node-2 data),$(port_of node-3 data)
for n in node-1 node-2 node-3; do
  grep -q "1 tag worker thread(s)" "$WORK/c/$n.log" || fail "$n did not start a tag worker (data.tag_threads)"
done

id=$("$SUBMIT" job.yaml --detach) || { fail "detached submit"; exit 1; }
state() { "$SUBMIT" status "$id" --json 2> /dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])' 2> /dev/null; }
for _ in $(seq 1 300); do [[ $(state) == running ]] && break; sleep 0.1; done
[[ $(state) == running ]] || fail "waited 30 s for job $id to run"

# /metrics of every node, polled during the attack: any answer but 200 fails.
( while true; do
    for n in node-1 node-2 node-3; do
      code=$(curl -s -m 5 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$(port_of $n http)/metrics")
      [[ $code == 200 ]] || echo "$n /metrics answered $code" >> metrics_failures.txt
    done
    sleep 0.5
  done ) &
poller=$!
timeout 120 python3 "$ATTACKER" --ports "$ports" --count 30000 --rate 5000 > attack.out 2>&1
rc=$?
cat attack.out
[[ $rc -eq 0 ]] || fail "the attacker exited $rc"
[[ $(state) == running ]] || fail "job $id was no longer running when the attack ended (make it longer)"
for n in node-1 node-2 node-3; do
  curl -s -m 5 "http://127.0.0.1:$(port_of $n http)/status" > "status-$n.json" || fail "$n /status"
  # The job's and the attack's tags were sealed and checked partly on the tag worker.
  on_workers=$(json "status-$n.json" "j['node']['tags_on_workers']")
  [[ $on_workers =~ ^[0-9]+$ && $on_workers -gt 0 ]] || fail "$n: its tag worker took no tags ($on_workers)"
  echo "$n: $on_workers tags sealed or checked on its tag worker"
done
kill "$poller" 2> /dev/null; wait "$poller" 2> /dev/null
[[ -f metrics_failures.txt ]] && { fail "/metrics did not always answer 200"; head metrics_failures.txt; }

for _ in $(seq 1 600); do  # 300 s for the job to end
  s=$(state); [[ $s == succeeded || $s == failed || $s == cancelled ]] && break; sleep 0.5
done
"$SUBMIT" status "$id" --json > job.json
[[ $(json job.json "j['state']") == succeeded ]] ||
  { fail "job state $(json job.json "j['state']"): $(json job.json "j.get('error')")"; "$SUBMIT" logs "$id" | tail -n 20; }
python3 - job.json status-node-*.json <<'PY' || fail "replicas, exactly once, or the drop counters"
import json, sys
r = json.load(open(sys.argv[1]))["result"]
diff = r["replica_max_relative_difference"]
sets = {(a["messages"], a["digest"]) for a in r["applied_updates"].values()}
print("replicas within %.1e, applied: %s, accuracy %.4f" % (diff, sorted(sets), r["accuracy"]))
ok = diff <= 1e-5 and len(sets) == 1 and len(r["applied_updates"]) == 3
drops = {}
for f in sys.argv[2:]:
    for p in json.load(open(f))["node"]["peers"]:
        for reason, n in p["drops"].items():
            drops[reason] = drops.get(reason, 0) + n
print("drops over the three nodes:", drops)
for reason in ["wrong_receiver", "replayed", "bad_tag", "wrong_version"]:
    if drops.get(reason, 0) < 1000:
        print("expected at least 1000 datagrams dropped as %s" % reason)
        ok = False
sys.exit(0 if ok else 1)
PY
echo "hostile datagrams test: $failures failures"
[[ $failures -eq 0 ]]
