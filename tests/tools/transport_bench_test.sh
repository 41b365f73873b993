#!/usr/bin/env bash
# tools/bench:transport_bench as a user runs it: a short table with both raw baselines and
# dtrain (every row a rate above zero, the ratio columns), and an unknown row refused with
# the list of rows; with --lanes 2, the dtrain rows over two lanes against two raw pairs. Figures are not judged here: this machine is shared and noisy.
set -uo pipefail
fail() { echo "FAIL: $*"; exit 1; }
bench=tools/bench/transport_bench
out=$(timeout 120 "$bench" --rows raw,raw-gso,auth --repeats 1 --messages 20 2>&1) ||
  fail "exit $?: $out"
echo "$out"
for row in "raw UDP, per datagram" "raw UDP, segmented" "dtrain, 2 MB messages, authenticated"; do
  line=$(grep -F "$row" <<<"$out") || fail "no row '$row'"
  mb=$(awk '{ print $(NF-3) }' <<<"$line")
  [[ $mb =~ ^[0-9]+$ && $mb -gt 0 ]] || fail "row '$row' has no rate: $line"
done
# Ratios against the baselines: the segmented row is 1.00 in its own column (the pairs' column
# is "-": not measured).
grep -F "raw UDP, segmented" <<<"$out" | grep -qE ' 1\.00 +-$' || fail "segmented row is not 1.00x itself"
out=$("$bench" --rows raw,nonesuch 2>&1); rc=$?
[[ $rc -eq 2 && $out == *"no row 'nonesuch'"*"raw-gso"* ]] || fail "bad row accepted (exit $rc): $out"
echo "unknown row refused: $out"
# With a tag worker beside each endpoint's I/O thread the messages still all arrive (a rate).
out=$(timeout 120 "$bench" --rows auth --repeats 1 --messages 20 --tag-threads 1 2>&1) ||
  fail "--tag-threads 1: exit $?: $out"
line=$(grep -F "dtrain, 2 MB messages, authenticated" <<<"$out") || fail "no dtrain row with --tag-threads 1"
[[ $(awk '{ print $(NF-3) }' <<<"$line") =~ ^[1-9][0-9]*$ ]] || fail "no rate with --tag-threads 1: $line"
out=$("$bench" --tag-threads 65 2>&1); rc=$?
[[ $rc -ne 0 && $out == *"--tag-threads"* ]] || fail "--tag-threads 65 accepted (exit $rc): $out"
echo "--tag-threads: $line"
# Tagging alone, on one thread and with a worker beside it: two rates and their ratio.
out=$(timeout 60 "$bench" --only tag-batches --tag-threads 1 2>&1) || fail "--only tag-batches: exit $?: $out"
[[ $out =~ ([0-9]+)\ MB/s\ on\ one\ thread,\ ([0-9]+)\ MB/s\ with\ 1\ tag ]] &&
  [[ ${BASH_REMATCH[1]} -gt 0 && ${BASH_REMATCH[2]} -gt 0 ]] || fail "--only tag-batches: $out"
echo "$out"
# Two lanes a side: every message still arrives (a rate), against two raw pairs at once.
out=$(timeout 120 "$bench" --rows raw-gso,raw-gso-pairs,auth --repeats 1 --messages 20 --lanes 2 2>&1) ||
  fail "--lanes 2: exit $?: $out"
echo "$out"
[[ $out == *"the dtrain rows: 2 lanes (I/O threads) per endpoint; 2 raw pairs at once"* ]] ||
  fail "--lanes 2: the table does not say so"
line=$(grep -F "raw UDP, segmented, one pair per lane" <<<"$out") || fail "no row of raw pairs"
grep -qE ' 1\.00$' <<<"$line" || fail "the pairs' row is not 1.00x itself: $line"
line=$(grep -F "dtrain, 2 MB messages, authenticated" <<<"$out") || fail "no dtrain row with --lanes 2"
[[ $(awk '{ print $(NF-3) }' <<<"$line") =~ ^[1-9][0-9]*$ ]] || fail "no rate with --lanes 2: $line"
out=$("$bench" --lanes 17 2>&1); rc=$?
[[ $rc -ne 0 && $out == *"--lanes"* ]] || fail "--lanes 17 accepted (exit $rc): $out"
out=$("$bench" --raw-seconds 0.1 2>&1); rc=$?
[[ $rc -ne 0 && $out == *"--raw-seconds"* ]] || fail "--raw-seconds 0.1 accepted (exit $rc): $out"
