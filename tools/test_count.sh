#!/usr/bin/env bash
# Counts one target's result into passed/failed/skipped from Bazel's status and its log.
# Bazel's status is the truth: a target that did not pass is a failure whatever its log says
# (a summary printed before a hang or a crash at exit). A passing target's log says how many
# test cases it ran (Catch2) and which of them could not run here ("SKIPPED: case: reason",
# tests/skip.h); a target without Catch2 is one test, skipped when it printed a SKIPPED line.
count_target() {
  local target=$1 status=$2 log=$3
  if [[ "$status" != "PASSED" ]]; then
    local f=""
    [[ "$status" == "FAILED" && -f "$log" ]] &&
      f=$(grep -E "^test cases: *[0-9]+ \|" "$log" | tail -n1 | sed -nE 's/.*\| *([0-9]+) failed.*/\1/p')
    failed=$((failed + (${f:-0} > 0 ? ${f:-0} : 1)))
    failures+=("$target: $status")
    return
  fi
  local skips=()
  [[ -f "$log" ]] && mapfile -t skips < <(grep "^SKIPPED: " "$log" | sort -u)
  local n=${#skips[@]} s
  for s in "${skips[@]}"; do skip_reasons+=("$target: ${s#SKIPPED: }"); done
  local line cases
  line=$([[ -f "$log" ]] && grep -E "^All tests passed \([0-9]+ assertions? in [0-9]+ test cases?\)" "$log" | tail -n1)
  if [[ -n "$line" ]]; then
    cases=$(sed -E 's/.* in ([0-9]+) test case.*/\1/' <<< "$line")
    if ((n > cases)); then
      failed=$((failed + 1)); failures+=("$target: $n SKIPPED lines for $cases test cases")
      return
    fi
    passed=$((passed + cases - n)); skipped=$((skipped + n))
    return
  fi
  if line=$([[ -f "$log" ]] && grep -E "^test cases: *[0-9]+ \|" "$log" | tail -n1) && [[ -n "$line" ]]; then
    if [[ $line != *failed* ]]; then
      # Every case passed without an assertion (each one skipped, say): Catch2 says so this way.
      cases=$(sed -nE 's/^test cases: *([0-9]+) .*/\1/p' <<< "$line")
      ((n > cases)) && { failed=$((failed + 1)); failures+=("$target: $n SKIPPED lines for $cases test cases"); return; }
      passed=$((passed + cases - n)); skipped=$((skipped + n))
      return
    fi
    # Catch2 reported failed cases, yet the binary exited 0: the cases decide.
    failed=$((failed + 1)); failures+=("$target: passed by Bazel, but Catch2 says: $line")
    return
  fi
  if ((n > 0)); then skipped=$((skipped + 1)); else passed=$((passed + 1)); fi
}
