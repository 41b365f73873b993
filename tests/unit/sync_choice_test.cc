// training.sync: auto's rule (core/train/sync_choice.h) on hand-computed figures: local steps
// with the smallest H whose round wait is under a tenth of H steps, clamped to [10, 20], where
// their wait per step is below per-step sharing's, else per-step sharing.
#include <catch2/catch.hpp>

#include <vector>

#include "core/train/sync_choice.h"

using namespace dtrain;

namespace {

core::SyncChoiceInputs inputs(double rtt_ms, double mb_s, double step_ms) {
  core::SyncChoiceInputs in;
  in.link = {rtt_ms / 1e3, mb_s * 1e6};
  in.step_s = step_ms / 1e3;
  in.num_params = 100000;
  in.round_bytes = 48000;  // 4 levels of 3% of 1e5 elements, sparse
  in.nodes = 3;
  in.workers = 3;
  return in;
}

}  // namespace

TEST_CASE("the smaller wait a step wins, also on a fast link; H from the round's wait") {
  const core::TrainingSpec t;  // max_sparsity 1e-2; a round's message: 48 kB (inputs())
  // bsp waits rtt/2 + 2 workers * 4 B * 1e5 * 1e-2 / goodput.
  // 0.1 ms, 1000 MB/s: 0.05 + 0.008 ms of a 10 ms step, 1%. A round: 0.1 + 2 * 48 kB / 1e9 =
  // 0.196 ms, 0.02 ms a step at H = 10 (the least): smaller still, local steps.
  core::SyncChoice c = core::choose_sync(t, inputs(0.1, 1000, 10));
  CHECK(c.local_steps == 10);
  CHECK(c.reason == "RTT 0.10 ms (1 hop apart), 1000.0 MB/s for a step's messages and "
                    "1000.0 MB/s for a round's, a step computes 10.00 ms and shares in 0.00 ms: "
                    "per-step sharing would wait 0.06 ms a step (1% of compute); local steps, H "
                    "= 10 (a round waits 0.20 ms: its message 48 kB, its work 0.00 ms)");
  // 2 ms, 100 MB/s: bsp waits 1.08 ms > 1 ms. A round waits 2 ms + 2 nodes * 48 kB / 1e8 =
  // 2.96 ms: 3 steps would do, the least is 10.
  c = core::choose_sync(t, inputs(2, 100, 10));
  CHECK(c.local_steps == 10);
  CHECK(c.reason == "RTT 2.00 ms (1 hop apart), 100.0 MB/s for a step's messages and "
                    "100.0 MB/s for a round's, a step computes 10.00 ms and shares in 0.00 ms: "
                    "per-step sharing would wait 1.08 ms a step (11% of compute); local steps, H "
                    "= 10 (a round waits 2.96 ms: its message 48 kB, its work 0.00 ms)");
  // 15 ms: a round waits 15.96 ms, 16 steps of 10 ms.
  CHECK(core::choose_sync(t, inputs(15, 100, 10)).local_steps == 16);
  // 50 ms at 12.5 MB/s with 2 ms steps: hundreds of steps would be needed; at most 20.
  CHECK(core::choose_sync(t, inputs(50, 12.5, 2)).local_steps == 20);
}

TEST_CASE("bandwidth alone can decide: a 0 ms link too narrow for a step's messages") {
  core::TrainingSpec t;
  // 1 MB/s: bsp's 8 kB a step take 8 ms of a 10 ms step.
  CHECK(core::choose_sync(t, inputs(0, 1, 10)).local_steps > 0);
  // A denser band costs more: 10x the elements at 100 MB/s (0.8 ms of a 5 ms step).
  CHECK(core::choose_sync(t, inputs(0, 100, 5)).local_steps == 0);
  t.threshold.max_sparsity = 0.1;
  CHECK(core::choose_sync(t, inputs(0, 100, 5)).local_steps > 0);
  // A threshold aiming at a density weighs the step's messages at it: 1e-3 of 1e5 elements
  // from 2 workers at 1 MB/s take 0.8 ms of a 10 ms step.
  t.threshold.algorithm = "target_sparsity";
  t.threshold.target_sparsity = 1e-3;
  CHECK(core::choose_sync(t, inputs(0, 1, 10)).local_steps == 0);
}

TEST_CASE("local steps only where their wait per step is below per-step sharing's") {
  core::TrainingSpec t;
  // 0 ms, 5 MB/s, 1 ms steps: bsp waits 8 kB / 5 MB/s = 1.6 ms. A round (48 kB) moves
  // 2 * 48 kB: 19.2 ms over H = 20 is 0.96 ms a step: local steps.
  CHECK(core::choose_sync(t, inputs(0, 5, 1)).local_steps == 20);
  // A round's message of 320 kB (2 * 320 kB: 128 ms, 6.4 ms a step): per-step sharing stays.
  core::SyncChoiceInputs heavy = inputs(0, 5, 1);
  heavy.round_bytes = 320000;
  const core::SyncChoice c = core::choose_sync(t, heavy);
  CHECK(c.local_steps == 0);
  CHECK(c.reason == "RTT 0.00 ms (1 hop apart), 5.0 MB/s for a step's messages and "
                    "5.0 MB/s for a round's, a step computes 1.00 ms and shares in 0.00 ms: "
                    "per-step sharing waits 1.60 ms a step (160% of compute), local steps 6.40 ms "
                    "(H = 20; a round waits 128.00 ms: its message 320 kB, its work 0.00 ms): "
                    "per-step sharing");
}

TEST_CASE("a round's message is weighed as the codec would send its levels") {
  core::LocalStepsSpec l;
  l.density = 1.0 / 32;  // tau: the largest magnitude of 32
  std::vector<float> v(32, 0.f);
  v[0] = 8.f, v[1] = -3.f, v[2] = 1.f;
  // tau 8: v[0] (4 bytes); tau 4: nothing; tau 2: v[1], leaving -1 (4 bytes); tau 1: v[1] and
  // v[2] (8 bytes). Two of 32 elements are a sixteenth: still sparse.
  l.levels = 4;
  CHECK(core::round_message_bytes(l, v.data(), 32) == 16.0);
  l.levels = 2;
  CHECK(core::round_message_bytes(l, v.data(), 32) == 4.0);
  // Every element at once: a bitmap, 2 bits each (two 32-bit words).
  std::vector<float> ones(32, 1.f);
  CHECK(core::round_message_bytes(l, ones.data(), 32) == 8.0);
}

TEST_CASE("a round's own work counts, with every other node's part decoded: bsp stays") {
  core::TrainingSpec t;
  // 0 ms, 5 MB/s, 1 ms steps: bsp waits 1.6 ms a step; a round's 19.2 ms of sending is 0.96 ms
  // a step at H = 20 (local steps, above). With 11 ms of work and 2 more parts of 2 ms each:
  // 34.2 ms, 1.71 ms a step.
  core::SyncChoiceInputs in = inputs(0, 5, 1);
  in.round_work_s = 0.011;
  in.part_decode_s = 0.002;
  const core::SyncChoice c = core::choose_sync(t, in);
  CHECK(c.local_steps == 0);
  CHECK_THAT(c.reason, Catch::Contains("local steps 1.71 ms (H = 20; a round waits 34.20 ms: its "
                                       "message 48 kB, its work 15.00 ms)"));
  // At a 50 ms round trip the work is small beside the wait: local steps.
  in = inputs(50, 5, 1);
  in.round_work_s = 0.011;
  in.part_decode_s = 0.002;
  CHECK(core::choose_sync(t, in).local_steps == 20);
}

TEST_CASE("per-step sharing's own work a step counts in its wait") {
  core::TrainingSpec t;
  // 0.1 ms, 1000 MB/s, 10 ms steps: 0.058 ms of waiting, 1% (the first case); with 1 ms of
  // encoding and applying a step, 1.06 ms: over the tenth, and local steps' round (0.1 ms +
  // 0.096 ms + 3 ms of work) wants 4 steps: H = 10, the least, 0.32 ms a step.
  core::SyncChoiceInputs in = inputs(0.1, 1000, 10);
  in.step_work_s = 0.001;
  in.round_work_s = 0.002;
  in.part_decode_s = 0.0005;
  const core::SyncChoice c = core::choose_sync(t, in);
  CHECK(c.local_steps == 10);
  CHECK(c.reason == "RTT 0.10 ms (1 hop apart), 1000.0 MB/s for a step's messages and "
                    "1000.0 MB/s for a round's, a step computes 10.00 ms and shares in 1.00 ms: "
                    "per-step sharing would wait 1.06 ms a step (11% of compute); local steps, H "
                    "= 10 (a round waits 3.20 ms: its message 48 kB, its work 3.00 ms)");
}

TEST_CASE("a round is weighed as a pseudo-gradient: near normal, levels past the first dense") {
  core::LocalStepsSpec l;
  l.density = 0.03;  // 4 levels, the default
  // At tau (3% of a normal sample beyond it) the first level is sparse; a normal sample has a
  // quarter of its elements within [tau/2, tau), so every later level is a bitmap of 2 bits an
  // element.
  const int64_t n = 235146;  // the example MLP
  const double bitmap = 4.0 * double((n + 15) / 16);  // 2 bits an element
  CHECK(core::pseudo_gradient_round_bytes(l, n) ==
        Approx(4 * 0.03 * n + 3 * bitmap).epsilon(0.01));
  // Past the sample, the weight scales with the model.
  const int64_t big = 4 * core::kRoundSample;
  CHECK(core::pseudo_gradient_round_bytes(l, big) ==
        Approx(4 * core::pseudo_gradient_round_bytes(l, core::kRoundSample)).epsilon(1e-9));
  // More levels, each a bitmap: more bytes.
  l.density = 0.003;
  l.levels = 8;
  CHECK(core::pseudo_gradient_round_bytes(l, n) ==
        Approx(4 * 0.003 * n + 7 * bitmap).epsilon(0.02));
  CHECK(core::pseudo_gradient_round_bytes(l, 0) == 0.0);
}

TEST_CASE("each mode is weighed with the goodput of its own message and the mesh's longest path") {
  core::TrainingSpec t;
  // 1e6 parameters: a step's message 40 kB (1e-2 of them, 4 bytes each), two of them to each
  // node; a round's 400 kB, two of them. 20 ms steps, no round trip.
  core::SyncChoiceInputs in = inputs(0, 2, 20);
  in.num_params = 1000000;
  in.round_bytes = 400000;
  // One goodput for both (2 MB/s): per-step sharing waits 80 kB / 2 MB/s = 40 ms a step, a
  // round 800 kB / 2 MB/s = 400 ms, 20 ms a step at H = 20: local steps.
  CHECK(core::choose_sync(t, in).local_steps == 20);
  // A step's messages fit where a round's overflow: 8 MB/s for them, 10 ms a step: bsp.
  in.link.step_goodput_bytes_s = 8e6;
  const core::SyncChoice c = core::choose_sync(t, in);
  CHECK(c.local_steps == 0);
  CHECK_THAT(c.reason, Catch::StartsWith("RTT 0.00 ms (1 hop apart), 8.0 MB/s for a step's "
                                         "messages and 2.0 MB/s for a round's"));
  CHECK_THAT(c.reason, Catch::Contains("per-step sharing waits 10.00 ms a step"));

  // A 3 ms round trip and 20 ms steps at 1000 MB/s: neighbours wait 1.5 ms a step, through a
  // relay (2 hops) 3 ms; a round's 3.1 ms is 0.31 ms a step at H = 10: local steps either way.
  // With a round's work of 20 ms the round waits 23.1 ms: H = 12 keeps it under a tenth of H
  // steps (1.92 ms a step), and the path decides: 1 hop (1.51 ms) per-step sharing, 2 hops
  // (3.01 ms) local steps.
  in = inputs(3, 1000, 20);
  CHECK(core::choose_sync(t, in).local_steps == 10);
  in.round_work_s = 0.020;
  CHECK(core::choose_sync(t, in).local_steps == 0);
  in.path_hops = 2;
  CHECK(core::choose_sync(t, in).local_steps == 12);
  CHECK_THAT(core::choose_sync(t, in).reason, Catch::StartsWith("RTT 3.00 ms (2 hops apart)"));
}

TEST_CASE("one node, or nothing measured, shares every step") {
  const core::TrainingSpec t;
  core::SyncChoiceInputs one = inputs(50, 1, 1);
  one.nodes = 1;
  CHECK(core::choose_sync(t, one).local_steps == 0);
  CHECK(core::choose_sync(t, inputs(50, 0, 1)).local_steps == 0);
  CHECK_THAT(core::choose_sync(t, inputs(50, 0, 1)).reason, Catch::Contains("nothing measured"));
}

TEST_CASE("the choice becomes the spec's sync") {
  core::TrainingSpec t;
  t.sync.mode = "auto";
  CHECK(core::sync_is_auto(t));
  core::apply_sync_choice(t, {32, "why"});
  CHECK(t.sync.mode == "local");
  CHECK(t.sync.local.steps == 32);
  CHECK(t.sync.local.density == 0.001);  // the rest are local steps' defaults
  CHECK(t.sync.bound == 0);
  core::apply_sync_choice(t, core::per_step_choice("one node"));
  CHECK(t.sync.mode == "bsp");
  CHECK(t.sync.bound == 1);
  CHECK(core::per_step_choice("one node").reason == "one node: per-step sharing");
}

TEST_CASE("where the nodes rehearsed, each mode's step as they took it decides") {
  const core::TrainingSpec t;
  // The probes alone say per-step sharing (0.1 ms, 1000 MB/s, 10 ms steps: it waits 0.06 ms a
  // step; a round 0.2 ms, 0.02 ms a step at H = 10, but the example weighs its work at 2 s).
  core::SyncChoiceInputs in = inputs(0.1, 1000, 10);
  in.round_work_s = 2.0;
  REQUIRE(core::choose_sync(t, in).local_steps == 0);
  // Rehearsed: a lock step took 30 ms (the slowest node's step, the relay), a step back to
  // back 12 ms and a round 100 ms: H = 10 (100 ms is a tenth of 100 steps of 10 ms; at most
  // 20) gives 12 + 100 / 20 = 17 ms a step against 30: local steps.
  in.rehearsal = core::RehearsalFigures{40, 0.030, 0.012, 0.100, 48000};
  core::SyncChoice c = core::choose_sync(t, in);
  CHECK(c.local_steps == 20);
  CHECK_THAT(c.reason, Catch::Contains("rehearsed 40 lock steps and rounds of 48 kB: per-step "
                                       "sharing takes 30.00 ms a step, local steps 17.00 ms "
                                       "(H = 20: 12.00 ms a step and a round of 100.00 ms): "
                                       "local steps, H = 20"));
  // Half a millisecond decides.
  in.rehearsal = core::RehearsalFigures{40, 0.0175, 0.012, 0.100, 48000};
  CHECK(core::choose_sync(t, in).local_steps == 20);
  // A lock step quicker than a step back to back and its share of a round: per-step sharing.
  in.rehearsal = core::RehearsalFigures{40, 0.016, 0.012, 0.100, 48000};
  c = core::choose_sync(t, in);
  CHECK(c.local_steps == 0);
  CHECK_THAT(c.reason, Catch::EndsWith("per-step sharing"));
  // A round rehearsed at a quarter of its size is taken four times as long (400 ms: 32 ms a
  // step at H = 20, against a 25 ms lock step).
  in.rehearsal = core::RehearsalFigures{40, 0.025, 0.012, 0.100, 12000};
  CHECK(core::choose_sync(t, in).local_steps == 0);
  in.rehearsal = core::RehearsalFigures{40, 0.025, 0.012, 0.100, 48000};
  CHECK(core::choose_sync(t, in).local_steps == 20);
}

TEST_CASE("the rehearsal's lock steps fill about two seconds, within bounds") {
  const core::TrainingSpec t;
  // 10 ms steps on a fast link: 200 would fill 2 s; at most 40.
  CHECK(core::rehearsal_steps(t, inputs(0.1, 1000, 10)) == core::kMaxRehearsalLockSteps);
  // A 200 ms round trip: a lock step takes 10 ms and waits 100.008 (half a round trip and
  // 8 kB at 1000 MB/s): 2 s is 18.2 of them, so 19.
  CHECK(core::rehearsal_steps(t, inputs(200, 1000, 10)) == 19);
  // Across a second's round trip, 4 would fill 2 s: at least 8.
  CHECK(core::rehearsal_steps(t, inputs(1000, 1000, 10)) == core::kMinRehearsalLockSteps);
  // No goodput measured: a step's messages would never arrive; the fewest.
  CHECK(core::rehearsal_steps(t, inputs(0, 0, 0)) == core::kMinRehearsalLockSteps);
  // Steps of seconds (a model sized for GPUs, timed on the CPU) are not rehearsed, nor is a
  // job of one node.
  CHECK(core::worth_rehearsing(inputs(0.1, 1000, 250)));
  CHECK_FALSE(core::worth_rehearsing(inputs(0.1, 1000, 251)));
  core::SyncChoiceInputs one = inputs(0.1, 1000, 10);
  one.nodes = 1;
  CHECK_FALSE(core::worth_rehearsing(one));
}
