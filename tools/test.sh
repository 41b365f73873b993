#!/usr/bin/env bash
# Sets up, builds and runs every test; ends with `tests: N passed, M failed, K skipped` counted
# from Bazel's real results (Catch2 test cases inside each test binary; one per other test
# target). A test that cannot run here says "SKIPPED: reason" and counts as skipped, not
# passed. Exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."

bash tools/setup.sh || { echo "tests: 0 passed, 1 failed"; exit 1; }

echo "== build (all targets)"
if ! bazel build //...; then
  echo "build failed"
  echo "tests: 0 passed, 1 failed"
  exit 1
fi

echo "== test"
bazel test //... 2>&1 | tee /tmp/dtrain-bazel-test.log
bazel_rc=${PIPESTATUS[0]}

# Count from the per-target logs Bazel wrote.
passed=0
failed=0
skipped=0
skip_reasons=()
testlogs=$(bazel info bazel-testlogs 2>/dev/null)
while read -r target status; do
  pkg=${target#//}
  log="$testlogs/${pkg/://}/test.log"
  cases=""
  if [[ -f "$log" && "$status" == "PASSED" ]] && reason=$(grep -m1 "^SKIPPED: " "$log"); then
    skipped=$((skipped + 1))
    skip_reasons+=("$target: ${reason#SKIPPED: }")
    continue
  fi
  if [[ -f "$log" ]]; then
    # Catch2: "All tests passed (A assertions in C test cases)" or
    #         "test cases: T | P passed | F failed"
    if line=$(grep -E "^All tests passed \([0-9]+ assertions? in [0-9]+ test cases?\)" "$log" | tail -n1) && [[ -n "$line" ]]; then
      cases=$(sed -E 's/.* in ([0-9]+) test case.*/\1/' <<< "$line")
      passed=$((passed + cases))
      continue
    fi
    if line=$(grep -E "^test cases: *[0-9]+ \|" "$log" | tail -n1) && [[ -n "$line" ]]; then
      p=$(sed -nE 's/.*\| *([0-9]+) passed.*/\1/p' <<< "$line")
      f=$(sed -nE 's/.*\| *([0-9]+) failed.*/\1/p' <<< "$line")
      passed=$((passed + ${p:-0}))
      failed=$((failed + ${f:-0}))
      [[ "$status" != "PASSED" && ${f:-0} -eq 0 ]] && failed=$((failed + 1))
      continue
    fi
  fi
  if [[ "$status" == "PASSED" ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done < <(grep -E "^//[^ ]+ +(\(cached\) )?(PASSED|FAILED|TIMEOUT|FLAKY|NO STATUS|INCOMPLETE|REMOTE FAILURE|FAILED TO BUILD)" /tmp/dtrain-bazel-test.log |
         sed -E 's/^(\/\/[^ ]+) +(\(cached\) )?([A-Z ]+[A-Z]).*/\1 \3/')

# CUDA: the kernels must compile here (no GPU); their tests run where a GPU is present and
# exit 77 (skipped) elsewhere.
echo "== CUDA code (bazel build --config=cuda)"
# Manual targets (plain `bazel build //...` must not need nvcc), so named one by one.
# GPU test binaries (package:name): built with --config=cuda, run with DTRAIN_REQUIRE_GPU=1.
gpu_tests=(cuda:codec_cuda_test conformance:backend_conformance_test e2e:gpu_worker_test cuda:gpu_lenet_test
           unit:mixed_precision_test unit:gpu_sharing_test cuda:gpu_resnet_precision_test)
cuda_targets=(//kernels/cuda:codec_cuda //kernels/cuda:backend //tools/bench:codec_cuda_bench
              //tools/bench:gpu_bench //daemon:dtraind //submit:dtrain-submit)
for t in "${gpu_tests[@]}"; do cuda_targets+=("//tests/$t"); done
if bazel build --config=cuda "${cuda_targets[@]}"; then
  passed=$((passed + 1))  # the CUDA build itself
  for t in "${gpu_tests[@]}"; do
    bin=bazel-bin/tests/${t%%:*}/${t#*:}
    out=$(DTRAIN_REQUIRE_GPU=1 "$bin" 2>&1); rc=$?
    echo "$out" | tail -n 3
    if [[ $rc -eq 77 ]]; then
      skipped=$((skipped + 1))
      skip_reasons+=("$bin: no GPU here")
    elif [[ $rc -eq 0 ]]; then
      cases=$(sed -nE 's/^All tests passed \([0-9]+ assertions? in ([0-9]+) test cases?\)/\1/p' <<< "$out")
      passed=$((passed + ${cases:-1}))
    else
      echo "FAILED: $bin"
      failed=$((failed + 1))
    fi
  done
else
  echo "FAILED: the CUDA build"
  failed=$((failed + 1))
fi

# Code that shares work between threads, again under ThreadSanitizer (halts on the first
# report; .bazelrc's tsan config builds into its own output folder). One count per target.
echo "== ThreadSanitizer (bazel test --config=tsan)"
tsan_tests=(//tests/transport:tag_workers_test //tests/transport:lanes_test)
bazel test --config=tsan "${tsan_tests[@]}" > /tmp/dtrain-tsan.log 2>&1; tsan_rc=$?
grep -E "^//" /tmp/dtrain-tsan.log
if [[ $tsan_rc -eq 0 ]]; then
  passed=$((passed + ${#tsan_tests[@]}))
else
  echo "FAILED: under ThreadSanitizer (exit $tsan_rc); the log's end:"
  tail -n 40 /tmp/dtrain-tsan.log
  failed=$((failed + 1))
fi
for r in "${skip_reasons[@]}"; do echo "skipped: $r"; done

if [[ $bazel_rc -ne 0 && $failed -eq 0 ]]; then
  echo "bazel test exited $bazel_rc without a failing target (build or setup problem)"
  failed=1
fi
echo "tests: $passed passed, $failed failed, $skipped skipped"
[[ $failed -eq 0 ]]
