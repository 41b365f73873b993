// mode allreduce trains like one worker on the workers' batches together
// (core/train/gradient_rounds.h): three workers of 10 examples each take 3 steps; a single model
// stepped with Adam on the same 30 examples a step (each worker's minibatch, concatenated) ends
// with the same parameters within 1e-5 relative. Adam is not linear in the gradient, so a mean
// of the workers' updates instead of their gradients would miss; and the three replicas agree
// bit for bit. The same on three emulated GPUs (kernels/emulated: no real GPU ran this), whose
// memory the host may reach only by download and upload: summed over their device group, and
// without one through host memory.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/data/minibatch_iterator.h"
#include "core/io/model_file.h"
#include "core/model/model.h"
#include "core/spec/job_spec_parser.h"
#include "core/train/training_data.h"
#include "core/train/training_run.h"
#include "core/updaters/updater.h"
#include "tests/test_util.h"

namespace dtrain {
namespace {

constexpr int kWorkers = 3;
constexpr int kSteps = 3;

core::JobSpec job_in(const std::string& dir) {
  const std::string csv = testing::write_separable_csv(dir);
  const std::string text =
      "name: allreduce\nseed: 11\nmodel:\n  input: [4]\n  layers:\n"
      "    - dense: {units: 8, activation: tanh}\n"
      "    - output: {units: 2, activation: softmax, loss: mcxent}\n"
      "  updater: {type: adam, learning_rate: 0.05}\n"
      "data:\n  train: {format: csv, path: " + csv + "}\n"
      "training: {mode: allreduce, epochs: 1, batch_size: 30, workers_per_node: 3}\n"
      "output: {model: " + dir + "/m.dtm}\n";
  return core::parse_job_spec_text(text, "allreduce.yaml", {});
}

struct Start : core::TrainingListener {
  std::vector<float> params;
  void on_start(const core::StartPoint& s) override {
    params.assign(s.params, s.params + s.num_params);
  }
};

// Minibatch `step` of every worker's shard, rows one after another.
void concatenated_batch(const core::ExampleSource& source, uint64_t seed, int64_t step,
                        core::Tensor& x, core::Tensor& y) {
  std::vector<float> xs, ys;
  int64_t rows = 0, in = 0, out = 0;
  for (int w = 0; w < kWorkers; ++w) {
    core::MinibatchIterator it(source, 30 / kWorkers, seed, w, kWorkers);
    it.start_epoch(0);
    core::Tensor bx, by;
    for (int64_t s = 0; s <= step; ++s) REQUIRE(it.next(bx, by));
    rows += bx.dim(0);
    in = bx.dim(1), out = by.dim(1);
    xs.insert(xs.end(), bx.data(), bx.data() + bx.size());
    ys.insert(ys.end(), by.data(), by.data() + by.size());
  }
  x.resize({rows, in});
  y.resize({rows, out});
  std::copy(xs.begin(), xs.end(), x.data());
  std::copy(ys.begin(), ys.end(), y.data());
}

std::vector<float> one_worker_on_the_whole_batch(const core::JobSpec& job,
                                                 const std::vector<float>& initial) {
  const core::TrainingData data = core::load_training_data(job);
  core::Model model(job.model);
  model.set_params(initial.data());
  auto updater = core::Updater::create(job.model.updater, job.model.l2, model.segments(),
                                       model.num_params());
  core::Rng rng(1);
  std::vector<float> step(size_t(model.num_params()));
  for (int64_t s = 0; s < kSteps; ++s) {
    core::Tensor x, y;
    concatenated_batch(data.train_source(), job.seed, s, x, y);
    model.compute_gradients(x, y, rng, 1.f);
    updater->compute_step(model.params(), model.grads(), step.data(), s, s + 1);
    for (int64_t i = 0; i < model.num_params(); ++i) model.params()[i] -= step[size_t(i)];
  }
  return std::vector<float>(model.host_params(), model.host_params() + model.num_params());
}

// Trains the job's 3 steps (on `gpus`, if any) and returns the largest relative difference of its
// parameters from one worker's on the concatenated batches.
double difference_from_one_worker(const std::vector<int>& gpus, std::string* how = nullptr) {
  const std::string dir = testing::temp_dir();
  const core::JobSpec job = job_in(dir);
  core::LocalTrainingOptions options;
  options.gpus = gpus;
  options.max_iterations = kSteps;
  options.evaluate_each_epoch = false;
  Start start;
  const core::TrainingResult result = core::train_local(job, start, options);
  REQUIRE(result.workers == kWorkers);
  INFO("the workers ran on " << result.device);
  if (!gpus.empty()) REQUIRE(result.device.find("gpu") == 0);
  REQUIRE(result.agreement.replicas == kWorkers);
  if (how) *how = result.gpu_sharing;
  CHECK(result.agreement.max_abs_diff == 0.0);  // the same bits
  const core::ModelFile trained = core::read_model_file(dir + "/m.dtm");
  REQUIRE(trained.iteration == kSteps);

  const std::vector<float> reference = one_worker_on_the_whole_batch(job, start.params);
  REQUIRE(reference.size() == trained.params.size());
  double largest = 0.0, moved = 0.0;
  for (size_t i = 0; i < reference.size(); ++i) {
    largest = std::max(largest, std::fabs(double(trained.params[i]) - reference[i]) /
                                    std::max(1e-3, std::fabs(double(reference[i]))));
    moved = std::max(moved, std::fabs(double(reference[i]) - start.params[i]));
  }
  INFO("largest move " << moved);
  CHECK(moved > 1e-2);  // the steps did something
  return largest;
}

}  // namespace

TEST_CASE("allreduce: 3 workers x 3 steps equal one worker on the concatenated batches") {
  const double largest = difference_from_one_worker({});
  INFO("largest relative difference " << largest);
  CHECK(largest <= 1e-5);
}

TEST_CASE("allreduce on three emulated GPUs: the same steps, summed over their device group") {
  setenv("DTRAIN_EMULATED_GPUS", "3", 1);
  std::string how;
  const double largest = difference_from_one_worker({0, 1, 2}, &how);
  INFO("largest relative difference " << largest);
  CHECK(largest <= 1e-5);
  // The node's sum made on the GPUs (the emulated group: no real GPU ran this).
  CHECK(how == "emulated all-reduce between GPUs 0, 1, 2");
  // Without a group: each gradient downloaded and summed in host memory, the same steps.
  setenv("DTRAIN_EMULATED_NCCL", "0", 1);
  const double host = difference_from_one_worker({0, 1, 2}, &how);
  unsetenv("DTRAIN_EMULATED_NCCL");
  unsetenv("DTRAIN_EMULATED_GPUS");
  CHECK(host <= 1e-5);
  CHECK_THAT(how, Catch::StartsWith("host memory (DTRAIN_EMULATED_NCCL=0"));
}

}  // namespace dtrain
