#!/usr/bin/env bash
# tools/bench:transport_bench as a user runs it: a short table with both raw baselines and
# dtrain (every row a rate above zero, both ratio columns), and an unknown row refused with
# the list of rows. Figures are not judged here: this machine is shared and noisy.
set -uo pipefail
fail() { echo "FAIL: $*"; exit 1; }
bench=tools/bench/transport_bench
out=$(timeout 120 "$bench" --rows raw,raw-gso,auth --repeats 1 --messages 20 2>&1) ||
  fail "exit $?: $out"
echo "$out"
for row in "raw UDP, per datagram" "raw UDP, segmented" "dtrain, 2 MB messages, authenticated"; do
  line=$(grep -F "$row" <<<"$out") || fail "no row '$row'"
  mb=$(awk '{ print $(NF-2) }' <<<"$line")
  [[ $mb =~ ^[0-9]+$ && $mb -gt 0 ]] || fail "row '$row' has no rate: $line"
done
# Ratios against both baselines: the segmented row is 1.00 in its own column.
grep -F "raw UDP, segmented" <<<"$out" | grep -qE ' 1\.00$' || fail "segmented row is not 1.00x itself"
out=$("$bench" --rows raw,nonesuch 2>&1); rc=$?
[[ $rc -eq 2 && $out == *"no row 'nonesuch'"*"raw-gso"* ]] || fail "bad row accepted (exit $rc): $out"
echo "unknown row refused: $out"
