#!/usr/bin/env bash
# Sets up, builds and runs every test; ends with `tests: N passed, M failed, K skipped` counted
# from Bazel's real results: each target's status decides whether it passed; a passing
# target counts its Catch2 test cases (one for any other target). A test case or test that
# cannot run here prints "SKIPPED: reason" (tests/skip.h) and counts as skipped, not passed.
# Exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."

bash tools/setup.sh || { echo "tests: 0 passed, 1 failed"; exit 1; }

# This run's logs (two runs at once on one machine must not share them).
logs=$(mktemp -d /tmp/dtrain-test.XXXXXX)
# How long each phase took, printed at the end (CI's budget is 50 minutes).
phase_times=()
phase_start=$SECONDS
end_phase() {
  phase_times+=("$1: $((SECONDS - phase_start)) s")
  phase_start=$SECONDS
}
end_phase setup

echo "== build (all targets)"
if ! bazel build //...; then
  echo "build failed"
  echo "tests: 0 passed, 1 failed"
  exit 1
fi
end_phase build

echo "== test"
bazel test //... 2>&1 | tee "$logs/bazel-test.log"
bazel_rc=${PIPESTATUS[0]}

source tools/test_count.sh  # count_target

# Count from the per-target logs Bazel wrote.
passed=0
failed=0
skipped=0
skip_reasons=()
failures=()
testlogs=$(bazel info bazel-testlogs 2>/dev/null)
while read -r target status; do
  pkg=${target#//}
  count_target "$target" "$status" "$testlogs/${pkg/://}/test.log"
done < <(grep -E "^//[^ ]+ +(\(cached\) )?(PASSED|FAILED|TIMEOUT|FLAKY|NO STATUS|INCOMPLETE|REMOTE FAILURE|FAILED TO BUILD)" "$logs/bazel-test.log" |
         sed -E 's/^(\/\/[^ ]+) +(\(cached\) )?([A-Z ]+[A-Z]).*/\1 \3/')

end_phase test
# CUDA: the kernels must compile here (no GPU); their tests run where a GPU is present and
# exit 77 (skipped) elsewhere.
echo "== CUDA code (bazel build --config=cuda)"
# Manual targets (plain `bazel build //...` must not need nvcc), so named one by one.
# GPU test binaries (package:name): built with --config=cuda, run with DTRAIN_REQUIRE_GPU=1
# (nccl_id_helper_test needs no GPU, only libnccl: it runs here).
gpu_tests=(cuda:codec_cuda_test conformance:backend_conformance_test e2e:gpu_worker_test cuda:gpu_lenet_test
           unit:mixed_precision_test unit:gpu_sharing_test cuda:gpu_resnet_precision_test
           cuda:nccl_nodes_test cuda:nccl_id_helper_test)
cuda_targets=(//kernels/cuda:codec_cuda //kernels/cuda:backend //tools/bench:codec_cuda_bench
              //tools/bench:gpu_bench //daemon:dtraind //submit:dtrain-submit)
for t in "${gpu_tests[@]}"; do cuda_targets+=("//tests/$t"); done
if bazel build --config=cuda "${cuda_targets[@]}"; then
  passed=$((passed + 1))  # the CUDA build itself
  for t in "${gpu_tests[@]}"; do
    bin=bazel-bin/tests/${t%%:*}/${t#*:}
    DTRAIN_REQUIRE_GPU=1 "$bin" > "$logs/gpu-test.log" 2>&1; rc=$?
    tail -n 3 "$logs/gpu-test.log"
    if [[ $rc -eq 77 ]]; then
      skipped=$((skipped + 1))
      skip_reasons+=("$bin: no GPU here")
    else
      count_target "$bin" "$([[ $rc -eq 0 ]] && echo PASSED || echo FAILED)" "$logs/gpu-test.log"
    fi
  done
else
  echo "FAILED: the CUDA build"
  failed=$((failed + 1))
fi

end_phase "CUDA build"
# Code that shares work between threads, again under ThreadSanitizer (halts on the first
# report; .bazelrc's tsan config builds into its own output folder). One count per target.
echo "== ThreadSanitizer (bazel test --config=tsan)"
# The transport's tag workers and lanes, the controller (its collaborators and its sessions),
# the mesh exchange, the message bus and the sharing workers with their step gate, local
# steps (a node's workers meeting at a round, the overlapped exchange), and allreduce (the
# ring's rounds with a lost node, over real endpoints, a node's workers meeting at a step, and
# its buckets' rounds on their own thread beside the workers' backward passes).
tsan_tests=(//tests/transport:tag_workers_test //tests/transport:lanes_test
            //tests/unit:controller_test //tests/unit:controller_parts_test
            //tests/unit:mesh_exchange_test //tests/unit:sharing_test //tests/unit:staleness_test
            //tests/unit:local_steps_test //tests/unit:ring_rounds_test //tests/unit:mesh_ring_test
            //tests/unit:allreduce_equivalence_test //tests/unit:gradient_rounds_test
            //tests/unit:nccl_between_nodes_test)
bazel test --config=tsan "${tsan_tests[@]}" > "$logs/tsan.log" 2>&1; tsan_rc=$?
grep -E "^//" "$logs/tsan.log"
if [[ $tsan_rc -eq 0 ]]; then
  passed=$((passed + ${#tsan_tests[@]}))
else
  echo "FAILED: under ThreadSanitizer (exit $tsan_rc); the log's end:"
  tail -n 40 "$logs/tsan.log"
  failed=$((failed + 1))
fi
end_phase ThreadSanitizer
echo "time per phase (total $SECONDS s): ${phase_times[*]/%/;}"
for r in "${skip_reasons[@]}"; do echo "skipped: $r"; done
for f in "${failures[@]}"; do echo "failed: $f"; done

if [[ $bazel_rc -ne 0 && $failed -eq 0 ]]; then
  echo "bazel test exited $bazel_rc without a failing target (build or setup problem)"
  failed=1
fi
echo "tests: $passed passed, $failed failed, $skipped skipped"
[[ $failed -eq 0 ]]
