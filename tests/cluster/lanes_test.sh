#!/usr/bin/env bash
# Lanes (docs/architecture/transport.md, "Lanes") and jumbo datagrams (docs/operations.md, "Jumbo
# frames"): three dtraind processes on loopback, each with data.lanes 3 (three I/O threads and
# sockets on its data port) and data.mtu 9000 (8,904-byte datagrams), train the example together
# with gradient sharing: the job succeeds with its replicas agreeing, no datagram reaches another
# lane's socket, and `nodes --json` shows each node's lanes and MTU. A fourth daemon with another
# lane count, and a fifth with another MTU, are refused when they register, naming the fix, and
# never join. Every wait has a deadline.
set -u
SPEC="$(cd "$(dirname "$4")" && pwd)/$(basename "$4")"
source "$(dirname "$0")/lib.sh" lanes "$1" "$2" "$3"
export PEER_TIMEOUT_MS=3000 HEARTBEAT_MS=300 LANES=3 MTU=9000

"$CLUSTER_TOOL" start 3 "$WORK/c" || { echo "FAIL: the cluster did not start"; exit 1; }
source "$WORK/c/env"
for i in 1 2 3; do
  grep -q "data channel on 127.0.0.1:[0-9]* in 3 lanes" "$WORK/c/node-$i.log" ||
    fail "node-$i did not open 3 lanes: $(grep 'data channel on' "$WORK/c/node-$i.log")"
  grep -q "data.mtu 9000: datagrams of up to 8904 bytes" "$WORK/c/node-$i.log" ||
    fail "node-$i does not say its datagram size: $(grep 'data.mtu' "$WORK/c/node-$i.log")"
done

sed -e 's/epochs: 5/epochs: 3/' -e 's/name: fashion-mnist-mlp/name: lanes-test/' \
    -e 's/model: fashion-mnist-mlp.dtm/model: lanes-test.dtm/' "$SPEC" > job.yaml
echo "== gradient sharing on 3 nodes of 3 lanes each"
timeout 300 "$SUBMIT" job.yaml > submit.out 2> submit.err
rc=$?
cat submit.out
[[ $rc -eq 0 ]] || { fail "submit exited $rc"; cat submit.err; tail -n 20 "$WORK"/c/node-*.log; }
"$SUBMIT" status --json > jobs.json || fail "status --json"
id=$(json jobs.json "j['jobs'][-1]['id']")
"$SUBMIT" status "$id" --json > job.json || fail "status JOB --json"
[[ $(json job.json "j['state']") == succeeded ]] || fail "state $(json job.json "j['state']")"
[[ $(json job.json "len(j['nodes'])") == 3 ]] || fail "the job did not run on 3 nodes"
acc=$(json job.json "j['result'].get('accuracy', 0)")
diff=$(json job.json "j['result'].get('replica_max_relative_difference', 1)")
python3 -c "import sys; sys.exit(0 if $acc >= 0.83 else 1)" || fail "accuracy $acc < 0.83"
python3 -c "import sys; sys.exit(0 if $diff <= 1e-5 else 1)" || fail "replicas differ by $diff"
echo "accuracy $acc, replicas within $diff"

# Each node's view of its peers (its /status): messages came in (from its tree neighbours), and
# no datagram was refused for its lane.
for i in 1 2 3; do
  fetch "http://127.0.0.1:$(http_port node-$i)/status" > node-$i.json || fail "node-$i /status"
  [[ $(json node-$i.json "j['node']['data_lanes']") == 3 ]] ||
    fail "node-$i /status data_lanes: $(json node-$i.json "j['node'].get('data_lanes')")"
  [[ $(json node-$i.json "sum(p.get('drops', {}).get('wrong_lane', 0) for p in j['node']['peers'])") == 0 ]] ||
    fail "node-$i refused datagrams for their lane: $(json node-$i.json "j['node']['peers']")"
  [[ $(json node-$i.json "sum(p['messages_in'] for p in j['node']['peers'])") -gt 0 ]] ||
    fail "node-$i received no message: $(json node-$i.json "j['node']['peers']")"
  # Jumbo datagrams went: more bytes a datagram than a 1500-byte MTU carries.
  sent="sum(p['bytes_out'] for p in j['node']['peers'])"
  datagrams="sum(p['datagrams_out'] for p in j['node']['peers'])"
  [[ $(json node-$i.json "$sent > 1408 * $datagrams") == True ]] ||
    fail "node-$i sent no datagram over 1408 bytes: $(json node-$i.json "j['node']['peers']")"
done
"$SUBMIT" nodes --json > nodes.json || fail "nodes --json"
[[ $(json nodes.json "sorted(n['data_lanes'] for n in j['nodes'])") == "[3, 3, 3]" ]] ||
  fail "nodes --json lanes: $(json nodes.json "[n.get('data_lanes') for n in j['nodes']]")"
[[ $(json nodes.json "sorted(n['data_mtu'] for n in j['nodes'])") == "[9000, 9000, 9000]" ]] ||
  fail "nodes --json MTUs: $(json nodes.json "[n.get('data_mtu') for n in j['nodes']]")"

# refused_daemon N KEY VALUE: a daemon node-N made from node-3's config without its `KEY: VALUE`
# (so with the default) registers; it must be refused within 10 s for KEY, naming the fix.
refused_daemon() {
  local n=$1 key=$2 value=$3 default=$4 refused=""
  echo "== a daemon with data.$key $default is refused when it registers"
  mkdir -p "$WORK/c/data-$n"
  sed -e "s/^name: node-3/name: node-$n/" -e "s|data-3|data-$n|" -e "s/, $key: $value//" \
      -e 's/^\(data: {.*port: \)[0-9]*/\10/' -e 's/^\(http: {.*port: \)[0-9]*/\10/' \
      "$WORK/c/node-3.yaml" > "$WORK/c/node-$n.yaml"
  grep -q "$key: " "$WORK/c/node-$n.yaml" && fail "node-$n's config still sets $key"
  "$DTRAIND" --config "$WORK/c/node-$n.yaml" > "$WORK/c/node-$n.log" 2>&1 &
  echo "$! node-$n" >> "$WORK/c/pids"  # stopped with the cluster, also on failure
  for _ in $(seq 1 100); do
    refused=$(grep -m 1 "refused this node" "$WORK/c/node-$n.log")
    [[ -n $refused ]] && break
    sleep 0.1
  done
  echo "$refused"
  [[ $refused == *"node node-$n has data.$key $default, and node node-"*" (alive) has $value"* ]] ||
    fail "node-$n was not refused for its $key within 10 s: $(tail -n 5 "$WORK/c/node-$n.log")"
  grep -q "set data.$key: $value in node-$n's dtraind.yaml" "$WORK/c/node-$n.log" ||
    fail "node-$n's refusal does not name the fix"
}
refused_daemon 4 lanes 3 1
refused_daemon 5 mtu 9000 1500
"$SUBMIT" nodes --json > nodes.json || fail "nodes --json"
[[ $(json nodes.json "len(j['nodes'])") == 3 ]] ||
  fail "node-4 or node-5 joined: $(json nodes.json "j['nodes']")"

finish lanes_test
