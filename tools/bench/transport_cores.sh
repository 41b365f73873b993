#!/usr/bin/env bash
# Authenticated goodput against raw UDP on a host with cores to spare (docs/performance.md, "The
# transport"): three separate runs of tools/bench:transport_bench, each the medians of 5, for each
# lane count; then the same over rate-limited links (transport_link.sh) where a network namespace
# can be made. Ends with one line per lane count giving the three runs' ratios, so their spread is
# read at a glance.
#
#   tools/bench/transport_cores.sh [--lanes "1 2 4 6 8"] [--runs 3] [--repeats 5]
#                                  [--messages 300] [--raw-seconds 1]
#                                  [--link-rates "10gbit 25gbit"] [--link-lanes "1 4"]
#
# --link-rates "": no link runs (they need root or user namespaces, and iproute2).
# The binary: $TRANSPORT_BENCH, else bazel-bin/tools/bench/transport_bench (an opt build).
# Baselines, measured in each run: raw UDP segmented (GSO/GRO) on one socket pair, and as many
# raw pairs at once as the dtrain rows have lanes ("x pairs": what the kernel gives N threads).
set -u
root="$(cd "$(dirname "$0")/../.." && pwd)"
BENCH="${TRANSPORT_BENCH:-$root/bazel-bin/tools/bench/transport_bench}"
LANES="1 2 4 6 8"; RUNS=3; REPEATS=5; MESSAGES=300; RAW_SECONDS=1
LINK_RATES="10gbit 25gbit"; LINK_LANES="1 4"
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --lanes|--runs|--repeats|--messages|--raw-seconds|--link-rates|--link-lanes)
      [[ $# -ge 2 ]] || { echo "$1 needs a value (see --help)" >&2; exit 2; } ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  case "$1" in
    --lanes) LANES=$2 ;;
    --runs) RUNS=$2 ;;
    --repeats) REPEATS=$2 ;;
    --messages) MESSAGES=$2 ;;
    --raw-seconds) RAW_SECONDS=$2 ;;
    --link-rates) LINK_RATES=$2 ;;
    --link-lanes) LINK_LANES=$2 ;;
  esac
  shift 2
done
[[ -x $BENCH ]] || { echo "no $BENCH: run bazel build -c opt //tools/bench:transport_bench" >&2; exit 1; }
echo "cores: $(nproc); kernel $(uname -r)"
declare -A summary
for run in $(seq 1 "$RUNS"); do
  for lanes in $LANES; do
    echo "== run $run, --lanes $lanes"
    table=$("$BENCH" --rows raw-gso,raw-gso-pairs,auth,insecure --repeats "$REPEATS" \
              --raw-seconds "$RAW_SECONDS" --messages "$MESSAGES" --lanes "$lanes" 2>&1) || {
      echo "$table"; echo "the bench failed (run $run, --lanes $lanes)" >&2; exit 1; }
    echo "$table"
    # The authenticated row's MB/s, x segmented and x pairs (the last columns of the table).
    row=$(awk '/authenticated/ { print $(NF-3) " MB/s: " $(NF-1) "x segmented, " $NF "x pairs" }' \
          <<< "$table")
    summary[$lanes]+="  run $run: $row"$'\n'
  done
done
for rate in $LINK_RATES; do
  for lanes in $LINK_LANES; do
    TRANSPORT_BENCH=$BENCH "$root/tools/bench/transport_link.sh" --repeats 3 --lanes "$lanes" "$rate" ||
      echo "(no link run at $rate: see above)"
  done
done
echo "== authenticated goodput, medians of $REPEATS, $RUNS separate runs"
for lanes in $LANES; do
  echo "--lanes $lanes"
  printf '%s' "${summary[$lanes]}"
done
