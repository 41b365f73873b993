#!/usr/bin/env bash
# Three hosts in network namespaces, each with its own address on a bridge and its egress
# limited to 100 Mbit/s with tc tbf: a dtraind per host (host 1 is also the controller), and
# dtrain-submit on host 1 trains Fashion-MNIST with gradient sharing across them. The data
# channel is chosen by network (10.77.0.0/24), as on a real cluster. Skipped, with a message,
# where network namespaces cannot be created (no CAP_NET_ADMIN).
set -u
DTRAIND="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
SUBMIT="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
SPEC="$(cd "$(dirname "$3")" && pwd)/$(basename "$3")"
WORK="${TEST_TMPDIR:-$(mktemp -d)}/netns"
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"
tag="dt$$"
hub="$tag-hub"
hosts=("$tag-h1" "$tag-h2" "$tag-h3")
pids=()

cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2> /dev/null; done
  sleep 1
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2> /dev/null; done
  for ns in "${hosts[@]}" "$hub"; do ip netns delete "$ns" 2> /dev/null; done
}
trap cleanup EXIT

if ! ip netns add "$hub" 2> netns.err; then
  echo "SKIPPED: cannot create network namespaces here ($(cat netns.err)); run as root (CAP_NET_ADMIN)"
  exit 0
fi
set -e
ip -n "$hub" link add br0 type bridge
ip -n "$hub" link set br0 up
for i in 1 2 3; do
  ns=${hosts[$((i - 1))]}
  ip netns add "$ns"
  ip link add "$tag-v$i" type veth peer name "$tag-p$i"
  ip link set "$tag-v$i" netns "$ns"
  ip link set "$tag-p$i" netns "$hub"
  ip -n "$ns" link set "$tag-v$i" name eth0
  ip -n "$ns" addr add "10.77.0.$i/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  ip -n "$hub" link set "$tag-p$i" master br0
  ip -n "$hub" link set "$tag-p$i" up
  # 100 Mbit/s out of each host.
  ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate 100mbit burst 256kb latency 50ms
done
set +e
"$DTRAIND" keygen cluster.key > /dev/null
for i in 1 2 3; do
  roles="[node]"
  [[ $i -eq 1 ]] && roles="[node, controller]"
  cat > "node-$i.yaml" <<YAML
name: host-$i
roles: $roles
data_dir: $WORK/data-$i
key_file: $WORK/cluster.key
controller: 10.77.0.1:7070
control: {address: 10.77.0.1, port: 7070}
data: {network: 10.77.0.0/24, port: 40123}
http: {address: 127.0.0.1, port: 7080}
threads: 1
YAML
  ip netns exec "${hosts[$((i - 1))]}" "$DTRAIND" --config "node-$i.yaml" > "node-$i.log" 2>&1 &
  pids+=($!)
done
on_h1() { ip netns exec "${hosts[0]}" "$@"; }
alive=0
for _ in $(seq 1 200); do  # 20 s for the three hosts to register
  alive=$(on_h1 "$SUBMIT" nodes --json --key-file cluster.key --controller 10.77.0.1:7070 2> /dev/null |
          grep -c '"state": "alive"')
  [[ $alive -ge 3 ]] && break
  sleep 0.1
done
if [[ $alive -lt 3 ]]; then
  echo "FAIL: only $alive of 3 hosts registered within 20 s"
  tail -n 5 node-*.log
  exit 1
fi
grep -q "data channel on interface eth0 (10.77.0.2:40123)" node-2.log ||
  { echo "FAIL: host 2 did not choose its data address by network"; cat node-2.log; exit 1; }
sed -e 's/name: fashion-mnist-mlp/name: netns-test/' -e 's/model: fashion-mnist-mlp.dtm/model: netns.dtm/' \
    "$SPEC" > job.yaml
timeout 300 ip netns exec "${hosts[0]}" "$SUBMIT" job.yaml --key-file cluster.key \
  --controller 10.77.0.1:7070 > submit.out 2>&1
rc=$?
tail -n 6 submit.out
if [[ $rc -ne 0 ]]; then
  echo "FAIL: the job across three namespaced hosts exited $rc"
  tail -n 20 node-*.log
  exit 1
fi
grep -q "succeeded" submit.out || { echo "FAIL: no success line"; exit 1; }
grep -q "over 3 nodes" submit.out || { echo "FAIL: the replicas were not compared over 3 nodes"; exit 1; }
echo "three namespaced hosts at 100 Mbit/s trained the job"
