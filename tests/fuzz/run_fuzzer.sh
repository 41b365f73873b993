#!/usr/bin/env bash
# Runs the datagram fuzzer for a bounded time (DTRAIN_FUZZ_SECONDS, default 30) from a fixed
# seed (DTRAIN_FUZZ_SEED, default 1: a failure reproduces); any crash, sanitizer report (they
# halt: the fuzzer is built with -fno-sanitize-recover) or leak fails the test, and the input
# that caused it is kept in the logs.
set -euo pipefail
fuzzer=$1
seconds=${DTRAIN_FUZZ_SECONDS:-30}
work=${TEST_TMPDIR:-$(mktemp -d)}
mkdir -p "$work/corpus"
seeds=("$(dirname "$0")"/seeds/*)
[[ -e ${seeds[0]} ]] || { echo "FAIL: no seed inputs in $(dirname "$0")/seeds"; exit 1; }
cp "${seeds[@]}" "$work/corpus/"
cd "$work"
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=halt_on_error=1
"$OLDPWD/$fuzzer" -seed="${DTRAIN_FUZZ_SEED:-1}" -max_total_time="$seconds" -max_len=1500 \
  -print_final_stats=1 corpus > fuzz.log 2>&1 ||
  { grep -v "^#[0-9]* *\(NEW\|REDUCE\|pulse\|INITED\)" fuzz.log | tail -n 80; exit 1; }
tail -n 6 fuzz.log
echo "fuzzer ran ${seconds}s without a crash"
