#!/usr/bin/env bash
# Goodput over a link of a given rate: tools/bench:transport_bench run inside a private network
# namespace (`unshare -n`: its own loopback, nothing else on the machine sees it) whose loopback
# a tbf qdisc limits to each rate in turn. What the table shows is what a network's capacity
# yields: raw UDP fills the link (per datagram and segmented; the faster of the two is the
# baseline), and dtrain's authenticated goodput is what is left after its headers, tags and
# acks, and after its CPU cost where the CPU, not the link, is the limit.
# Usage: tools/bench/transport_link.sh [--repeats N] [--lanes L] [RATE ...]
#   (rates default to 1gbit 4gbit 10gbit; L: dtrain's lanes, its I/O threads per endpoint)
# Needs root, or unprivileged user namespaces (then it runs as `unshare -rn`). The binary: the
# one `bazel build -c opt //tools/bench:transport_bench` made (or $TRANSPORT_BENCH).
set -u
root="$(cd "$(dirname "$0")/../.." && pwd)"
BENCH="${TRANSPORT_BENCH:-$root/bazel-bin/tools/bench/transport_bench}"
repeats=3
lanes=1
while [ "${1:-}" = "--repeats" ] || [ "${1:-}" = "--lanes" ]; do
  if [ "$1" = "--repeats" ]; then repeats="$2"; else lanes="$2"; fi
  shift 2
done
rates=("$@")
[ ${#rates[@]} -gt 0 ] || rates=(1gbit 4gbit 10gbit)
[ -x "$BENCH" ] || { echo "no $BENCH: run bazel build -c opt //tools/bench:transport_bench" >&2; exit 1; }
for tool in ip tc; do
  command -v "$tool" > /dev/null ||
    { echo "no '$tool' on the PATH: install iproute2 (apt-get install iproute2)" >&2; exit 1; }
done
unshare_args=(-n)
[ "$(id -u)" = 0 ] || unshare_args=(-rn)
if ! unshare "${unshare_args[@]}" true 2> /dev/null; then
  echo "cannot make a network namespace (unshare ${unshare_args[*]}): run as root, or enable" \
       "unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1)" >&2
  exit 1
fi
for rate in "${rates[@]}"; do
  echo "== loopback limited to $rate (tbf, 4 MB burst)"
  # The bench's processes live and die inside the namespace's shell, which waits for them.
  unshare "${unshare_args[@]}" bash -c '
    ip link set lo up && tc qdisc add dev lo root tbf rate "$1" burst 4mb latency 50ms || exit 1
    "$2" --repeats "$3" --lanes "$4" --rows raw,raw-gso,auth,insecure 2>&1 | grep -v INSECURE
  ' _ "$rate" "$BENCH" "$repeats" "$lanes" || { echo "the run at $rate failed" >&2; exit 1; }
done
