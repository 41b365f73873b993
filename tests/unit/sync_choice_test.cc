// training.sync: auto's rule (core/train/sync_choice.h) on hand-computed figures: per-step
// sharing where its wait is under a tenth of a step's compute, else local steps with the
// smallest H whose round wait is under a tenth of H steps, clamped to [10, 50].
#include <catch2/catch.hpp>

#include "core/train/sync_choice.h"

using namespace dtrain;

namespace {

core::SyncChoiceInputs inputs(double rtt_ms, double mb_s, double step_ms) {
  core::SyncChoiceInputs in;
  in.link = {rtt_ms / 1e3, mb_s * 1e6};
  in.step_s = step_ms / 1e3;
  in.num_params = 100000;
  in.nodes = 3;
  in.workers = 3;
  return in;
}

}  // namespace

TEST_CASE("a fast link keeps per-step sharing; slower ones get local steps, H from the wait") {
  const core::TrainingSpec t;  // max_sparsity 1e-2; local: density 0.03, 4 levels
  // bsp waits rtt/2 + 2 workers * 4 B * 1e5 * 1e-2 / goodput.
  // 0.1 ms, 1000 MB/s: 0.05 + 0.008 ms of a 10 ms step.
  core::SyncChoice c = core::choose_sync(t, inputs(0.1, 1000, 10));
  CHECK(c.local_steps == 0);
  CHECK(c.reason == "RTT 0.10 ms, 1000.0 MB/s, a step computes 10.00 ms: per-step sharing "
                    "waits 0.06 ms a step (1% of compute)");
  // 2 ms, 100 MB/s: bsp waits 1.08 ms > 1 ms. A round waits 2 ms + 2 nodes * 4 levels * 4 B *
  // 1e5 * 0.03 / 1e8 = 2.96 ms: 3 steps would do, the least is 10.
  c = core::choose_sync(t, inputs(2, 100, 10));
  CHECK(c.local_steps == 10);
  CHECK(c.reason == "RTT 2.00 ms, 100.0 MB/s, a step computes 10.00 ms: per-step sharing would "
                    "wait 1.08 ms a step (11% of compute); local steps, H = 10 (a round waits "
                    "2.96 ms)");
  // 20 ms: a round waits 20.96 ms, 21 steps of 10 ms.
  CHECK(core::choose_sync(t, inputs(20, 100, 10)).local_steps == 21);
  // 50 ms at 12.5 MB/s with 2 ms steps: hundreds of steps would be needed; at most 50.
  CHECK(core::choose_sync(t, inputs(50, 12.5, 2)).local_steps == 50);
}

TEST_CASE("bandwidth alone can decide: a 0 ms link too narrow for a step's messages") {
  core::TrainingSpec t;
  // 1 MB/s: bsp's 8 kB a step take 8 ms of a 10 ms step.
  CHECK(core::choose_sync(t, inputs(0, 1, 10)).local_steps > 0);
  // A denser band costs more: 10x the elements at 100 MB/s (0.8 ms of a 5 ms step).
  CHECK(core::choose_sync(t, inputs(0, 100, 5)).local_steps == 0);
  t.threshold.max_sparsity = 0.1;
  CHECK(core::choose_sync(t, inputs(0, 100, 5)).local_steps > 0);
}

TEST_CASE("one node, or nothing measured, shares every step") {
  const core::TrainingSpec t;
  core::SyncChoiceInputs one = inputs(50, 1, 1);
  one.nodes = 1;
  CHECK(core::choose_sync(t, one).local_steps == 0);
  CHECK(core::choose_sync(t, inputs(50, 0, 1)).local_steps == 0);
  CHECK(core::choose_sync(t, inputs(50, 0, 1)).reason.find("nothing measured") != std::string::npos);
}

TEST_CASE("the choice becomes the spec's sync") {
  core::TrainingSpec t;
  t.sync.mode = "auto";
  CHECK(core::sync_is_auto(t));
  core::apply_sync_choice(t, {32, "why"});
  CHECK(t.sync.mode == "local");
  CHECK(t.sync.local.steps == 32);
  CHECK(t.sync.local.density == 0.03);  // the rest are local steps' defaults
  CHECK(t.sync.bound == 0);
  core::apply_sync_choice(t, core::per_step_choice("one node"));
  CHECK(t.sync.mode == "bsp");
  CHECK(t.sync.bound == 1);
  CHECK(core::per_step_choice("one node").reason == "one node: per-step sharing");
}
