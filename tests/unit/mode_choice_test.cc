// training.mode: auto's rule (core/train/mode_choice.h) on hand-computed figures: allreduce
// where its step (a step's compute and the ring, rehearsed or from the probes) takes no longer
// than gradient sharing's step as sync auto chose it, else gradient sharing with that choice.
#include <catch2/catch.hpp>

#include "core/train/mode_choice.h"

using namespace dtrain;

namespace {

core::TrainingSpec auto_mode() {
  core::TrainingSpec t;
  t.mode = core::TrainingMode::kAuto;
  t.sync.mode = "auto";
  return t;
}

// Three nodes of one worker, 1e5 parameters, a 10 ms step; a round of local steps does 20 ms
// of work and per-step sharing 2 ms a step, so that local steps take 1.01 ms a step more.
core::SyncChoiceInputs inputs(double rtt_ms, double mb_s) {
  core::SyncChoiceInputs in;
  in.link = {rtt_ms / 1e3, mb_s * 1e6};
  in.step_s = 0.010;
  in.num_params = 100000;
  in.round_bytes = 48000;
  in.round_work_s = 0.020;
  in.step_work_s = 0.002;
  in.nodes = 3;
  in.workers = 3;
  return in;
}

}  // namespace

TEST_CASE("the ring's wait: 2 (N - 1) sends of a step's values over N, each half a round trip") {
  // 4 B x 100002 / 3 = 133,336 B a send: 0.133336 ms at 1000 MB/s, and 0.05 ms: 4 sends.
  CHECK(core::ring_wait_s(inputs(0.1, 1000)) == Approx(4 * (0.05e-3 + 133336 / 1e9)));
  core::SyncChoiceInputs one = inputs(0.1, 1000);
  one.nodes = 1;
  CHECK(core::ring_wait_s(one) == 0.0);  // no ring
}

TEST_CASE("the rehearsal's ring steps fill about 2 s at the probes' estimate, 8 to 40") {
  CHECK(core::rehearsal_ring_steps(inputs(0.1, 1000)) == 40);  // 10.7 ms a step: 187
  core::SyncChoiceInputs wide = inputs(0.1, 100);
  wide.num_params = 5824522;  // 4 sends of 7.8 MB at 100 MB/s: 0.31 s a step, 7 would do
  CHECK(core::rehearsal_ring_steps(wide) == 8);
  wide.num_params = 1000000;  // 4 x 13.4 ms and the step: 64 ms, 32 steps
  CHECK(core::rehearsal_ring_steps(wide) == 32);
}

TEST_CASE("from the probes: allreduce on a fast link, gradient sharing on a slower one") {
  const core::TrainingSpec t = auto_mode();
  // 1000 MB/s: allreduce 10 + 0.733 ms; local steps (H = 20) 10 + 20.196 / 20 = 11.01 ms.
  core::SyncChoice c = core::choose_training(t, inputs(0.1, 1000));
  CHECK(c.allreduce);
  CHECK(c.local_steps == 0);
  CHECK(c.step_s == Approx(0.010733344));
  CHECK_THAT(c.reason, Catch::Contains("local steps, H = 20"));
  CHECK_THAT(c.reason,
             Catch::EndsWith("; allreduce takes 10.73 ms a step (a step's compute and a ring of "
                             "3 nodes waiting 0.73 ms), gradient sharing as chosen 11.01 ms: "
                             "allreduce"));
  core::TrainingSpec applied = t;
  core::apply_sync_choice(applied, c);
  CHECK(applied.mode == core::TrainingMode::kAllreduce);
  CHECK(applied.sync.mode == "bsp");
  CHECK(applied.sync.bound == 1);
  // 100 MB/s: the ring waits 5.53 ms, local steps 1.05 ms a step: gradient sharing, H = 20.
  c = core::choose_training(t, inputs(0.1, 100));
  CHECK_FALSE(c.allreduce);
  CHECK(c.local_steps == 20);
  CHECK_THAT(c.reason, Catch::EndsWith("waiting 5.53 ms), gradient sharing as chosen 11.05 ms: "
                                       "gradient sharing"));
  applied = t;
  core::apply_sync_choice(applied, c);
  CHECK(applied.mode == core::TrainingMode::kGradientSharing);
  CHECK(applied.sync.mode == "local");
  CHECK(applied.sync.local.steps == 20);
}

TEST_CASE("rehearsed: allreduce's ring steps against the sharing step sync auto chose") {
  const core::TrainingSpec t = auto_mode();
  core::SyncChoiceInputs in = inputs(0.1, 1000);
  // A lock step 12 ms; local steps 10 ms a step and a 30 ms round: H = 20, 11.5 ms a step.
  in.rehearsal = core::RehearsalFigures{16, 0.012, 0.010, 0.030, 48000, 16, 0.0112};
  core::SyncChoice c = core::choose_training(t, in);
  CHECK(c.allreduce);
  CHECK(c.step_s == 0.0112);
  CHECK_THAT(c.reason, Catch::EndsWith("allreduce takes 11.20 ms a step (rehearsed over 16 ring "
                                       "steps), gradient sharing as chosen 11.50 ms: allreduce"));
  in.rehearsal->ring_step_s = 0.0118;  // slower than local steps: they stay
  c = core::choose_training(t, in);
  CHECK_FALSE(c.allreduce);
  CHECK(c.local_steps == 20);
  CHECK(c.step_s == Approx(0.0115));
  in.rehearsal->ring_step_s = 0.0115;  // a tie: the exact mean
  CHECK(core::choose_training(t, in).allreduce);
  // Without the ring's figures (its steps failed), allreduce is estimated from the probes.
  in.rehearsal->ring_step_s = 0.0;
  c = core::choose_training(t, in);
  CHECK(c.allreduce);
  CHECK_THAT(c.reason, Catch::Contains("a ring of 3 nodes waiting 0.73 ms"));
}

TEST_CASE("what keeps gradient sharing: fp16, one node, nothing measured, another mode") {
  core::TrainingSpec t = auto_mode();
  t.precision = kernels::Precision::kFp16;
  core::SyncChoice c = core::choose_training(t, inputs(0.1, 1000));
  CHECK_FALSE(c.allreduce);
  CHECK_THAT(c.reason, Catch::StartsWith("precision fp16, which allreduce refuses: gradient "
                                         "sharing; RTT 0.10 ms"));
  t.precision = kernels::Precision::kFp32;
  core::SyncChoiceInputs one = inputs(0.1, 1000);
  one.nodes = 1;
  c = core::choose_training(t, one);
  CHECK_FALSE(c.allreduce);
  CHECK(c.reason == "one node: per-step sharing; nothing to weigh allreduce against: gradient "
                    "sharing");
  core::SyncChoiceInputs unmeasured = inputs(0.1, 0);
  CHECK_FALSE(core::choose_training(t, unmeasured).allreduce);
  // A job of gradient sharing with sync auto gets sync auto's choice, allreduce never.
  core::TrainingSpec sharing;
  sharing.sync.mode = "auto";
  c = core::choose_training(sharing, inputs(0.1, 1000));
  CHECK_FALSE(c.allreduce);
  CHECK(c.reason == core::choose_sync(sharing, inputs(0.1, 1000)).reason);
  // A choice of allreduce never turns another mode into it (a node checks it may take it).
  core::apply_sync_choice(sharing, core::SyncChoice{0, "", true});
  CHECK(sharing.mode == core::TrainingMode::kGradientSharing);
  core::JobSpec job;
  job.training = auto_mode();
  CHECK(core::may_choose_allreduce(job));
  job.training.precision = kernels::Precision::kFp16;
  CHECK_FALSE(core::may_choose_allreduce(job));
  job.training.precision = kernels::Precision::kBf16;
  job.data.train.shards = "/data/{node}/*.dtb";
  CHECK_FALSE(core::may_choose_allreduce(job));
  job.data.train.shards.clear();
  CHECK(core::may_choose_allreduce(job));
  job.training.mode = core::TrainingMode::kGradientSharing;
  CHECK_FALSE(core::may_choose_allreduce(job));
  // In one process (`dtrain-submit --local`, core::train_local) a mode auto shares every step.
  core::apply_sync_choice(t, core::per_step_choice("one process"));
  CHECK(t.mode == core::TrainingMode::kGradientSharing);
  CHECK(t.sync.mode == "bsp");
}
