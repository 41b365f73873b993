#!/usr/bin/env bash
# Three hosts in network namespaces, each with its own address on a bridge and its egress
# limited to 100 Mbit/s with tc tbf: a dtraind per host (host 1 is also the controller), and
# dtrain-submit on host 1 trains Fashion-MNIST with gradient sharing across them. The data
# channel is chosen by network (10.77.0.0/24), as on a real cluster. Skipped, with a message,
# where network namespaces cannot be created (no CAP_NET_ADMIN).
set -u
SPEC="$(cd "$(dirname "$3")" && pwd)/$(basename "$3")"
source "$(dirname "$0")/lib.sh" netns "$1" "$2" "$4"

hosts_up 3 100mbit
for i in 1 2 3; do start_host "$i"; done
wait_alive 3 20
grep -q "data channel on interface eth0 (10.77.0.2:40123)" node-2.log ||
  { echo "FAIL: host 2 did not choose its data address by network"; cat node-2.log; exit 1; }
sed -e 's/name: fashion-mnist-mlp/name: netns-test/' -e 's/model: fashion-mnist-mlp.dtm/model: netns.dtm/' \
    "$SPEC" > job.yaml
timeout 300 ip netns exec "$tag-h1" "$SUBMIT" job.yaml > submit.out 2>&1
rc=$?
tail -n 6 submit.out
if [[ $rc -ne 0 ]]; then
  echo "FAIL: the job across three namespaced hosts exited $rc"
  tail -n 20 node-*.log
  exit 1
fi
grep -q "succeeded" submit.out || fail "no success line"
grep -q "over 3 nodes" submit.out || fail "the replicas were not compared over 3 nodes"
# The example names no training.sync: the default, auto, measured the hosts' link and said so.
grep -q "training.sync auto: RTT .* MB/s" submit.out ||
  fail "the job's log does not say what sync: auto measured and chose"
grep -o "training.sync auto: .*" submit.out | head -n 1
# data.mtu past the interface's (the hosts' veth links carry 1500 bytes): refused at start,
# naming both and the fix, before the daemon binds anything.
cat > mtu.yaml <<YAML
name: host-mtu
roles: [node]
data_dir: $WORK/data-mtu
key_file: $WORK/cluster.key
controller: 10.77.0.1:7070
data: {network: 10.77.0.0/24, port: 40124, mtu: 9000}
http: {address: 127.0.0.1, port: 7081}
YAML
timeout 20 ip netns exec "$tag-h3" "$DTRAIND" --config mtu.yaml > mtu.log 2>&1
rc=$?
[[ $rc -ne 0 && $rc -ne 124 ]] || fail "a daemon with data.mtu 9000 on a 1500-byte link exited $rc"
refusal="data.mtu is 9000 (datagrams of 8932 bytes with their IP and UDP headers) but the data"
refusal+=" channel's interface eth0 has an MTU of 1500"
if ! grep -q "$refusal" mtu.log ||
   ! grep -q "set data.mtu: 1500 on every node" mtu.log; then
  fail "the data.mtu refusal does not name the MTUs and the fix"
  cat mtu.log
fi
finish "three namespaced hosts at 100 Mbit/s"
