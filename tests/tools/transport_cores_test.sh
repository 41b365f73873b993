#!/usr/bin/env bash
# tools/bench/transport_cores.sh as a user runs it, shortened (two runs of one repeat, lanes 1
# and 2, no link runs): a table per run and lane count, then a summary with a line per run for
# each lane count that carries a rate and both ratios. Figures are not judged (a shared,
# 2-core machine). A missing value and an unknown option are refused with a pointer to --help.
set -uo pipefail
fail() { echo "FAIL: $*"; exit 1; }
export TRANSPORT_BENCH=$PWD/tools/bench/transport_bench
script=tools/bench/transport_cores.sh
out=$(timeout 240 "$script" --lanes "1 2" --runs 2 --repeats 1 --messages 10 --raw-seconds 0.2 \
        --link-rates "" 2>&1) || fail "exit $?: $out"
echo "$out"
[[ $out == *"cores: "* ]] || fail "the cores are not reported"
for run in 1 2; do
  for lanes in 1 2; do
    [[ $out == *"== run $run, --lanes $lanes"* ]] || fail "no table for run $run, --lanes $lanes"
  done
done
summary=${out#*"== authenticated goodput, medians of 1, 2 separate runs"}
[[ $summary != "$out" ]] || fail "no summary"
for lanes in 1 2; do
  block=$(awk -v want="--lanes $lanes" '$0 == want { on = 1; next } /^--lanes/ { on = 0 } on' <<<"$summary")
  [[ $(grep -cE '^  run [12]: [1-9][0-9]* MB/s: [0-9.]+x segmented, [0-9.]+x pairs$' <<<"$block") -eq 2 ]] ||
    fail "--lanes $lanes: the summary lacks a line per run: $block"
done
out=$("$script" --runs 2>&1); rc=$?
[[ $rc -eq 2 && $out == *"--runs needs a value"* ]] || fail "a missing value accepted (exit $rc): $out"
out=$("$script" --fast 2>&1); rc=$?
[[ $rc -eq 2 && $out == *"unknown option --fast"*"--help"* ]] || fail "unknown option accepted (exit $rc): $out"
out=$("$script" --help 2>&1) || fail "--help: exit $?"
[[ $out == *"--link-rates"* ]] || fail "--help does not name the options: $out"
echo "transport_cores: all checks passed"
