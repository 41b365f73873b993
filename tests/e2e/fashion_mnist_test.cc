// End to end on the real data: the MLP of configs/fashion-mnist-mlp.yaml (784-256-128-10)
// reaches at least 0.85 test accuracy, the saved model evaluates to the same accuracy, and
// training is reproducible from the seed.
#include <catch2/catch.hpp>

#include <cstring>
#include <mutex>
#include <vector>

#include "core/eval/evaluate.h"
#include "core/io/saved_model.h"
#include "core/spec/job_spec_parser.h"
#include "core/train/training_run.h"
#include "core/train/training_data.h"
#include "tests/test_util.h"

namespace dtrain {
namespace {

// Prints each epoch and keeps, per epoch, the compute time its workers' steps reported, to
// check the epoch's compute share against.
class EpochLog : public core::TrainingListener {
 public:
  void on_worker_step(int, const core::WorkerStep& step) override {
    std::lock_guard<std::mutex> lock(mutex_);
    compute_ms_ += step.times.compute_ms;
  }
  void on_epoch(const core::EpochSummary& s) override {
    WARN("epoch " << s.epoch + 1 << ": train loss " << s.train_loss << ", test accuracy "
                  << s.eval.accuracy() << ", " << s.samples_per_sec << " samples/s, "
                  << 100 * s.compute_share << "% computing");
    std::lock_guard<std::mutex> lock(mutex_);
    epochs_.push_back({s.seconds, compute_ms_, s.compute_share});
    compute_ms_ = 0;
  }
  struct Epoch {
    double seconds, compute_ms, share;
  };
  std::vector<Epoch> epochs_;

 private:
  std::mutex mutex_;
  double compute_ms_ = 0;
};

}  // namespace

TEST_CASE("the Fashion-MNIST MLP reaches 0.85 and its model file evaluates the same") {
  core::JobSpec job = core::parse_job_spec_file("configs/fashion-mnist-mlp.yaml");
  const std::string out = testing::temp_dir() + "/mlp.dtm";
  core::LocalTrainingOptions options;
  options.output_path = out;
  EpochLog log;
  core::TrainingResult result = core::train_local(job, log, options);
  REQUIRE(result.evaluated);
  REQUIRE(result.epochs.size() == 5);
  CHECK(result.final_eval.count() == 10000);
  CHECK(result.final_eval.accuracy() >= 0.85);
  // Learning happened every epoch on average: the last epoch's loss is below the first's.
  CHECK(result.epochs.back().train_loss < result.epochs.front().train_loss);
  // Each epoch's compute share is its workers' step compute time over their epoch time.
  REQUIRE(log.epochs_.size() == 5);
  for (const auto& e : log.epochs_) {
    CHECK(e.share > 0.05);
    CHECK(e.share == Approx(e.compute_ms / 1000 / (e.seconds * result.workers)).epsilon(1e-9));
  }

  core::SavedModel saved = core::load_saved_model(out);
  core::TrainingData data = core::load_training_data(saved.spec);
  core::Evaluation again = core::evaluate(*saved.model, data.test, saved.spec.evaluation.top_n);
  CHECK(again.accuracy() == result.final_eval.accuracy());
  CHECK(again.counts() == result.final_eval.counts());
}

TEST_CASE("training is reproducible from the seed") {
  core::JobSpec job = core::parse_job_spec_file("configs/fashion-mnist-mlp.yaml");
  job.training.workers_per_node = 1;  // several workers interleave by thread timing
  const std::string dir = testing::temp_dir();
  core::TrainingListener quiet;
  core::LocalTrainingOptions options;
  options.max_iterations = 40;
  options.evaluate_each_epoch = false;
  options.threads = 1;
  options.output_path = dir + "/a.dtm";
  core::train_local(job, quiet, options);
  options.output_path = dir + "/b.dtm";
  core::train_local(job, quiet, options);
  job.seed += 1;
  options.output_path = dir + "/c.dtm";
  core::train_local(job, quiet, options);
  auto a = core::read_model_file(dir + "/a.dtm");
  auto b = core::read_model_file(dir + "/b.dtm");
  auto c = core::read_model_file(dir + "/c.dtm");
  CHECK(a.iteration == 40);
  CHECK(a.params == b.params);
  CHECK(a.params != c.params);
}

}  // namespace dtrain
