#!/usr/bin/env bash
# N "hosts" on this machine: network namespaces TAG-h1..TAG-hN with eth0 = 10.77.0.i/24 on a
# bridge in TAG-hub, each host's egress limited with tc tbf (a real link's rate). With DELAY,
# any two hosts are DELAY apart one way (a round trip of twice DELAY): this kernel has no netem,
# so each host's eth0 is a TAP device and a user-space delay line (tools/delay_line) holds every
# frame for half of DELAY on its way to and from the bridge (docs/operations.md, "Test hosts
# with latency"). Needs root (CAP_NET_ADMIN). Used by tests/netns and tools/bench/cluster.
#
#   tools/netns_hosts.sh up TAG N RATE [DELAY]  e.g. up dt1 3 100mbit 25ms
#                                               (exit 77: namespaces not permitted)
#   tools/netns_hosts.sh rate TAG N RATE        change every host's egress rate
#   tools/netns_hosts.sh mtu TAG N MTU          every host's eth0 and bridge port (e.g. 9000)
#   tools/netns_hosts.sh down TAG N             delete them (and stop their delay lines)
# The delay line's binary: $DELAY_LINE, else bazel-bin/tools/delay_line/delay_line (bazel build
# //tools/delay_line).
set -uo pipefail
cmd=${1:-}; tag=${2:-}; n=${3:-}
usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; }
[[ -n $cmd && -n $tag && $n =~ ^[0-9]+$ ]] || { usage; exit 2; }
pids_file=/run/dtrain-netns-$tag.pids

shape() {  # shape NS RATE
  ip netns exec "$1" tc qdisc replace dev eth0 root tbf rate "$2" burst 256kb latency 50ms
}

# half_delay DELAY: half of "25ms", "500us", "1s" or "0", in microseconds; fails on anything else.
half_delay() {
  awk -v d="$1" 'BEGIN {
    if (match(d, /^[0-9]+(\.[0-9]+)?(us|ms|s)?$/) == 0) exit 1
    v = d + 0; u = d; sub(/^[0-9.]+/, "", u)
    if (u == "ms") v *= 1000; else if (u == "s") v *= 1000000; else if (u == "" && v != 0) exit 1
    printf "%dus\n", v / 2 }'
}

# link_veth I NS: host I's eth0 is one end of a veth pair whose other end is on the bridge.
link_veth() {
  ip link add "$tag-v$1" type veth peer name "$tag-p$1"
  ip link set "$tag-v$1" netns "$2"
  ip link set "$tag-p$1" netns "$tag-hub"
  ip -n "$2" link set "$tag-v$1" name eth0
}

# link_delayed I NS HALF: host I's eth0 and its port on the bridge are TAP devices joined by a
# delay line holding each frame for HALF; waits (5 s at most) until it has attached to both.
link_delayed() {
  ip -n "$2" tuntap add dev eth0 mode tap
  ip -n "$tag-hub" tuntap add dev "$tag-p$1" mode tap
  "$delay_line" "$2" eth0 "$tag-hub" "$tag-p$1" "$3" 2>> "/run/dtrain-netns-$tag-$1.log" &
  echo "$!" >> "$pids_file"
  for _ in $(seq 1 50); do
    ip -n "$2" link show eth0 | grep -q NO-CARRIER || return 0
    sleep 0.1
  done
  echo "the delay line of $2 did not attach within 5 s: $(cat "/run/dtrain-netns-$tag-$1.log")" >&2
  return 1
}

case $cmd in
  up)
    rate=${4:?rate, e.g. 100mbit}
    delay=${5:-}
    if [[ -n $delay ]]; then
      half=$(half_delay "$delay") || { echo "not a delay: '$delay' (write it as 25ms, 500us or 0)" >&2; exit 2; }
      delay_line=${DELAY_LINE:-$(dirname "$0")/../bazel-bin/tools/delay_line/delay_line}
      [[ -x $delay_line ]] || { echo "no delay line at $delay_line (bazel build //tools/delay_line)" >&2; exit 1; }
      if [[ ! -c /dev/net/tun ]]; then
        echo "cannot make TAP devices here: no /dev/net/tun (modprobe tun)" >&2
        exit 77
      fi
    fi
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
      if [[ -n $delay ]]; then link_delayed "$i" "$ns" "$half"; else link_veth "$i" "$ns"; fi
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
  mtu)
    for i in $(seq 1 "$n"); do
      ip -n "$tag-hub" link set "$tag-p$i" mtu "${4:?mtu}"
      ip -n "$tag-h$i" link set eth0 mtu "$4"
    done
    ;;
  down)
    if [[ -f $pids_file ]]; then
      while read -r pid; do kill "$pid" 2> /dev/null; done < "$pids_file"
      while read -r pid; do  # each exits within its 200 ms poll; 2 s at most
        for _ in $(seq 1 20); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
      done < "$pids_file"
      # What each delay line dropped (a full queue, or a device that refused a frame).
      for log in /run/dtrain-netns-"$tag"-*.log; do
        [[ -f $log ]] && grep -h "stopped" "$log" | sed "s|^|$(basename "$log" .log): |" >&2
      done
      rm -f "$pids_file" /run/dtrain-netns-"$tag"-*.log
    fi
    for i in $(seq 1 "$n"); do ip netns delete "$tag-h$i" 2> /dev/null; done
    ip netns delete "$tag-hub" 2> /dev/null
    true
    ;;
  *) usage; exit 2 ;;
esac
