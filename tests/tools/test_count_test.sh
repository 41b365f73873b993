#!/usr/bin/env bash
# tools/test_count.sh, the count behind CI's `tests: N passed, M failed, K skipped`: Bazel's status
# decides whether a target passed, whatever its log says; a passing Catch2 target counts its test
# cases, less those that printed SKIPPED (each a skip); any other target is one test.
set -u
source "${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-dtrain}/tools/test_count.sh" 2>/dev/null ||
  source tools/test_count.sh
dir=${TEST_TMPDIR:-$(mktemp -d)}
failures_seen=0
check() {  # what, then the expected passed/failed/skipped
  local what=$1 want="$2 $3 $4" got="$passed $failed $skipped"
  if [[ "$got" != "$want" ]]; then
    echo "FAIL: $what: counted $got (passed failed skipped), want $want"
    failures_seen=$((failures_seen + 1))
  else
    echo "ok: $what: $got"
  fi
}
reset() { passed=0; failed=0; skipped=0; skip_reasons=(); failures=(); }

printf 'All tests passed (12 assertions in 4 test cases)\n' > "$dir/catch_ok.log"
printf 'SKIPPED: aes case: no AES-NI\nSKIPPED: aes case: no AES-NI\nSKIPPED: gso case: no GSO\nAll tests passed (12 assertions in 4 test cases)\n' > "$dir/catch_skips.log"
printf 'test cases: 5 | 3 passed | 2 failed\nassertions: 9 | 7 passed | 2 failed\n' > "$dir/catch_fail.log"
printf 'SKIPPED: only case: no GPU\ntest cases: 1 | 1 passed\nassertions: - none -\n' > "$dir/catch_none.log"
printf 'everything fine\n' > "$dir/shell_ok.log"
printf 'SKIPPED: no network namespaces here\n' > "$dir/shell_skip.log"

reset; count_target //t:a PASSED "$dir/catch_ok.log"; check "a passing Catch2 binary" 4 0 0
reset; count_target //t:a PASSED "$dir/catch_skips.log"
check "a passing Catch2 binary with two skipped cases (one printed twice)" 2 0 2
[[ ${#skip_reasons[@]} -eq 2 ]] || { echo "FAIL: skip reasons ${skip_reasons[*]}"; failures_seen=$((failures_seen + 1)); }
reset; count_target //t:a FAILED "$dir/catch_ok.log"
check "a FAILED target whose log says all passed (a crash at exit)" 0 1 0
reset; count_target //t:a TIMEOUT "$dir/catch_ok.log"; check "a TIMEOUT after the summary" 0 1 0
reset; count_target //t:a "FAILED TO BUILD" "$dir/catch_ok.log"; check "a stale log of a target that did not build" 0 1 0
reset; count_target //t:a FLAKY "$dir/catch_ok.log"; check "a FLAKY target" 0 1 0
reset; count_target //t:a FAILED "$dir/catch_fail.log"; check "a FAILED Catch2 binary: its failed cases" 0 2 0
reset; count_target //t:a PASSED "$dir/catch_fail.log"; check "exit 0 although Catch2 failed cases" 0 1 0
reset; count_target //t:a PASSED "$dir/catch_none.log"; check "a Catch2 binary whose one case skipped, no assertion" 0 0 1
reset; count_target //t:a PASSED "$dir/shell_ok.log"; check "a passing shell test" 1 0 0
reset; count_target //t:a PASSED "$dir/shell_skip.log"; check "a skipped shell test" 0 0 1
reset; count_target //t:a PASSED "$dir/missing.log"; check "a passing target without a log" 1 0 0
echo "test_count_test: $failures_seen failures"
[[ $failures_seen -eq 0 ]]
