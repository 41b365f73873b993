#!/usr/bin/env bash
# The test hosts' latency (tools/netns_hosts.sh up TAG N RATE DELAY; docs/operations.md, "Test
# hosts with latency"): two hosts at 100 Mbit/s and a one-way delay of 0, 25 and 100 ms. The
# median UDP round trip is twice the delay within 10% (under 2 ms at 0), and a TCP stream's
# steady rate is the link's within 10%. Skipped, with the reason, where network namespaces cannot
# be created (no CAP_NET_ADMIN).
set -u
HOSTS_TOOL="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
export DELAY_LINE="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
PROBE="$(cd "$(dirname "$3")" && pwd)/$(basename "$3")"
WORK="${TEST_TMPDIR:-$(mktemp -d)}/delay_line"
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"
tag="dl$$"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
trap '"$HOSTS_TOOL" down "$tag" 2' EXIT
in_host() { local h=$1; shift; ip netns exec "$tag-h$h" "$@"; }

# check_link DELAY_MS: the hosts up with that delay, the round trip and the TCP rate measured.
check_link() {
  "$HOSTS_TOOL" up "$tag" 2 100mbit "${1}ms" 2> up.err
  local rc=$?
  if [[ $rc -eq 77 ]]; then
    echo "SKIPPED: $(cat up.err)"
    exit 0
  fi
  [[ $rc -eq 0 ]] || { fail "setting up the hosts at ${1} ms: $(cat up.err)"; return; }
  in_host 2 timeout 30 python3 "$PROBE" echo 9999 25 &
  local echo_pid=$!
  local rtt
  rtt=$(in_host 1 timeout 20 python3 "$PROBE" rtt 10.77.0.2 9999 20 2> rtt.err) ||
    fail "no round trip at ${1} ms: $(tail -n 1 rtt.err)"
  kill "$echo_pid" 2> /dev/null
  wait "$echo_pid" 2> /dev/null
  in_host 2 timeout 40 python3 "$PROBE" sink 9998 35 > rate.out 2> rate.err &
  local sink_pid=$!
  in_host 1 timeout 35 python3 "$PROBE" source 10.77.0.2 9998 40 2> source.err ||
    fail "the TCP stream at ${1} ms failed: $(tail -n 1 source.err)"
  wait "$sink_pid"
  local rate
  rate=$(cat rate.out)
  echo "one-way delay ${1} ms: round trip ${rtt:-?} ms, TCP ${rate:-?} Mbit/s (asked: $((2 * $1)) ms, 100 Mbit/s)"
  python3 - "${rtt:-nan}" "$1" <<'PY' || fail "round trip ${rtt:-none} ms at a one-way delay of ${1} ms"
import sys
rtt, delay = float(sys.argv[1]), float(sys.argv[2])
sys.exit(0 if (rtt < 2.0 if delay == 0 else abs(rtt - 2 * delay) <= 0.1 * 2 * delay) else 1)
PY
  python3 -c "import sys; sys.exit(0 if 90 <= float('${rate:-0}') <= 110 else 1)" ||
    fail "TCP ${rate:-none} Mbit/s at ${1} ms, not 100 within 10%"
  "$HOSTS_TOOL" down "$tag" 2
}

for delay in 0 25 100; do check_link "$delay"; done
if [[ $failures -ne 0 ]]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all delay line checks passed"
