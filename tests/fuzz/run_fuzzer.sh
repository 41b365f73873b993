#!/usr/bin/env bash
# Runs the datagram fuzzer for a bounded time (DTRAIN_FUZZ_SECONDS, default 30); any crash,
# sanitizer report or leak fails the test, and the input that caused it is kept in the logs.
set -euo pipefail
fuzzer=$1
seconds=${DTRAIN_FUZZ_SECONDS:-30}
work=${TEST_TMPDIR:-$(mktemp -d)}
mkdir -p "$work/corpus"
cp "$(dirname "$0")"/seeds/* "$work/corpus/" 2>/dev/null || true
cd "$work"
"$OLDPWD/$fuzzer" -max_total_time="$seconds" -max_len=1500 -print_final_stats=1 corpus > fuzz.log 2>&1 ||
  { grep -v "^#[0-9]* *\(NEW\|REDUCE\|pulse\|INITED\)" fuzz.log | tail -n 80; exit 1; }
tail -n 6 fuzz.log
echo "fuzzer ran ${seconds}s without a crash"
