#!/usr/bin/env bash
# N "hosts" on this machine: network namespaces TAG-h1..TAG-hN with eth0 = 10.77.0.i/24 on a
# bridge in TAG-hub, each host's egress limited with tc tbf (a real link's rate, no netem).
# Needs root (CAP_NET_ADMIN). Used by tests/netns and tools/bench/cluster.
#
#   tools/netns_hosts.sh up TAG N RATE     e.g. up dt1 3 100mbit (exit 77: namespaces not permitted)
#   tools/netns_hosts.sh rate TAG N RATE   change every host's egress rate
#   tools/netns_hosts.sh down TAG N        delete them
set -uo pipefail
cmd=${1:-}; tag=${2:-}; n=${3:-}
[[ -n $cmd && -n $tag && $n =~ ^[0-9]+$ ]] || { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

shape() {  # shape NS RATE
  ip netns exec "$1" tc qdisc replace dev eth0 root tbf rate "$2" burst 256kb latency 50ms
}

case $cmd in
  up)
    rate=${4:?rate, e.g. 100mbit}
    if ! command -v ip > /dev/null; then
      echo "cannot create network namespaces here: no 'ip' (apt-get install iproute2)" >&2
      exit 77
    fi
    if ! err=$(ip netns add "$tag-hub" 2>&1); then
      # Only a machine that does not permit namespaces is a skip; anything else (a namespace
      # left by an earlier run, say) is a failure to look at.
      if [[ $err == *"Operation not permitted"* || $err == *"Permission denied"* ]]; then
        echo "cannot create network namespaces here: $err (run as root)" >&2
        exit 77
      fi
      echo "ip netns add $tag-hub failed: $err (a namespace left by an earlier run? remove it:" \
           "$0 down $tag $n)" >&2
      exit 1
    fi
    set -e
    ip -n "$tag-hub" link add br0 type bridge
    ip -n "$tag-hub" link set br0 up
    for i in $(seq 1 "$n"); do
      ns="$tag-h$i"
      ip netns add "$ns"
      ip link add "$tag-v$i" type veth peer name "$tag-p$i"
      ip link set "$tag-v$i" netns "$ns"
      ip link set "$tag-p$i" netns "$tag-hub"
      ip -n "$ns" link set "$tag-v$i" name eth0
      ip -n "$ns" addr add "10.77.0.$i/24" dev eth0
      ip -n "$ns" link set eth0 up
      ip -n "$ns" link set lo up
      ip -n "$tag-hub" link set "$tag-p$i" master br0
      ip -n "$tag-hub" link set "$tag-p$i" up
      shape "$ns" "$rate"
    done
    ;;
  rate)
    for i in $(seq 1 "$n"); do shape "$tag-h$i" "${4:?rate}"; done
    ;;
  down)
    for i in $(seq 1 "$n"); do ip netns delete "$tag-h$i" 2> /dev/null; done
    ip netns delete "$tag-hub" 2> /dev/null
    true
    ;;
  *) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
