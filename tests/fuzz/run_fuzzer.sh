#!/usr/bin/env bash
# Runs a libFuzzer binary for a bounded time from its corpus, with a fixed seed so that a
# failure reproduces:  run_fuzzer.sh FUZZER CORPUS_DIR MAX_LEN SECONDS
# (DTRAIN_FUZZ_SECONDS and DTRAIN_FUZZ_SEED override the time and the seed, default 1). Any
# crash, sanitizer report (they halt: the fuzzers are built with -fno-sanitize-recover) or leak
# fails the test, and the input that caused it is kept in the logs. The corpus in the
# repository is only read: new inputs go to a scratch copy.
set -euo pipefail
fuzzer=$1
corpus_dir="$(dirname "$0")/$2"
max_len=${3:-1500}
seconds=${DTRAIN_FUZZ_SECONDS:-${4:-30}}
work=${TEST_TMPDIR:-$(mktemp -d)}
mkdir -p "$work/corpus"
seeds=("$corpus_dir"/*)
[[ -e ${seeds[0]} ]] || { echo "FAIL: no seed inputs in $corpus_dir"; exit 1; }
cp "${seeds[@]}" "$work/corpus/"
cd "$work"
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=halt_on_error=1
"$OLDPWD/$fuzzer" -seed="${DTRAIN_FUZZ_SEED:-1}" -max_total_time="$seconds" -max_len="$max_len" \
  -print_final_stats=1 corpus > fuzz.log 2>&1 ||
  { grep -v "^#[0-9]* *\(NEW\|REDUCE\|pulse\|INITED\)" fuzz.log | tail -n 80; exit 1; }
tail -n 6 fuzz.log
echo "$(basename "$fuzzer") ran ${seconds}s from ${#seeds[@]} corpus inputs without a crash"
