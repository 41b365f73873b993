// A resumed run starts from its checkpoint bit for bit (core/train/training_run.h, "restore"):
// two gradient-sharing workers train and checkpoint mid-epoch; a run resumed from the newest
// checkpoint starts its first step at the checkpoint's position with exactly its parameters and
// batch-norm statistics, and the lead worker's residual and threshold are the checkpoint's.
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>
#include <random>

#include "core/spec/job_spec_parser.h"
#include "core/train/checkpoints.h"
#include "core/train/training_run.h"
#include "tests/test_util.h"

namespace dtrain {
namespace {

core::JobSpec job_in(const std::string& dir) {
  const std::string csv = testing::write_separable_csv(dir);
  const std::string text =
      "name: resume\nseed: 3\nmodel:\n  input: [4]\n  layers:\n"
      "    - dense: {units: 8}\n    - batch_norm: {activation: relu}\n"
      "    - output: {units: 2, activation: softmax, loss: mcxent}\n"
      "  updater: {type: adam, learning_rate: 0.01}\n"
      "data:\n  train: {format: csv, path: " + csv + "}\n"
      "training: {epochs: 3, batch_size: 32, workers_per_node: 2, sync: bsp}\n"
      "output: {model: " + dir + "/m.dtm, checkpoint_every: 5, keep_checkpoints: 3}\n";
  return core::parse_job_spec_text(text, "resume.yaml", {});
}

struct Start : core::TrainingListener {
  bool called = false;
  core::StartPoint at;
  std::vector<float> params, state;
  void on_start(const core::StartPoint& s) override {
    called = true;
    at = s;
    params.assign(s.params, s.params + s.num_params);
    state.assign(s.state, s.state + s.num_state);
  }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("a run resumed from a checkpoint starts from its parameters, bit for bit") {
  const std::string dir = testing::temp_dir();
  core::JobSpec job = job_in(dir);
  core::LocalTrainingOptions first;
  first.max_iterations = 12;  // mid-epoch 1 (16 minibatches per worker per epoch)
  first.evaluate_each_epoch = false;
  Start fresh;
  core::train_local(job, fresh, first);
  REQUIRE(fresh.called);
  CHECK_FALSE(fresh.at.restored);
  CHECK(fresh.at.iteration == 0);

  const core::ResumePoint point = core::find_resume_point(dir + "/m.dtm");
  REQUIRE(point.model.iteration == 10);
  core::JobSpec resumed = job;
  resumed.model.init_from = point.path;
  resumed.model.init_from_updater = point.model.has_updater;
  core::LocalTrainingOptions again;
  again.resume = &point.model;
  again.max_iterations = 11;  // one step: the start is what is checked
  again.evaluate_each_epoch = false;
  Start start;
  core::train_local(resumed, start, again);
  REQUIRE(start.called);
  CHECK(start.at.restored);
  CHECK(start.at.epoch == 0);
  CHECK(start.at.iteration == 10);
  CHECK(same_bits(start.params, point.model.params));
  CHECK(same_bits(start.state, point.model.state));
  CHECK_FALSE(same_bits(start.params, fresh.params));  // it trained in between
}

}  // namespace dtrain
