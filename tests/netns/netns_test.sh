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
HOSTS_TOOL="$(cd "$(dirname "$4")" && pwd)/$(basename "$4")"
WORK="${TEST_TMPDIR:-$(mktemp -d)}/netns"
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"
tag="dt$$"
hosts=("$tag-h1" "$tag-h2" "$tag-h3")
pids=()

cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2> /dev/null; done
  sleep 1
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2> /dev/null; done
  "$HOSTS_TOOL" down "$tag" 3
}
trap cleanup EXIT

"$HOSTS_TOOL" up "$tag" 3 100mbit 2> netns.err
rc=$?
if [[ $rc -eq 77 ]]; then
  echo "SKIPPED: $(cat netns.err)"
  exit 0
fi
[[ $rc -eq 0 ]] || { echo "FAIL: setting up the namespaces: $(cat netns.err)"; exit 1; }
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
# The example names no training.sync: the default, auto, measured the hosts' link and said so.
grep -q "training.sync auto: RTT .* MB/s" submit.out ||
  { echo "FAIL: the job's log does not say what sync: auto measured and chose"; exit 1; }
grep -o "training.sync auto: .*" submit.out | head -n 1
echo "three namespaced hosts at 100 Mbit/s trained the job"
