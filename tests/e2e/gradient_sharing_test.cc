// In-node gradient sharing on the real data (docs/architecture/core.md, "The update"): W = 1, 2, 4
// workers train the example MLP; every replica must equal the initial parameters minus the sum of
// all messages (audited independently of the trainer), the replicas must agree, and W = 2 and 4
// must reach the accuracy of W = 1 within 1.5 points.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <mutex>

#include "core/codec/reference_codec.h"
#include "core/io/model_file.h"
#include "core/spec/job_spec_parser.h"
#include "core/train/training_run.h"
#include "tests/test_util.h"

namespace dtrain {
namespace {

// Sums every message ever produced, in double, from the producing threads.
class MessageAudit {
 public:
  explicit MessageAudit(int64_t n) : sum_(n, 0.0) {}
  void add(const core::EncodedMessage& m) {
    std::vector<float> decoded(m.length, 0.f);
    core::EncodedMessage local = m;
    local.param_offset = 0;
    core::reference_decode_add(local, decoded.data());
    std::lock_guard<std::mutex> lock(mutex_);
    for (int64_t i = 0; i < m.length; ++i) sum_[m.param_offset + i] += decoded[i];
    min_tau_ = std::min(min_tau_, m.tau);
    ++messages_;
  }
  const std::vector<double>& sum() const { return sum_; }
  float min_tau() const { return min_tau_; }
  int64_t messages() const { return messages_; }

 private:
  std::mutex mutex_;
  std::vector<double> sum_;
  float min_tau_ = INFINITY;
  int64_t messages_ = 0;
};

struct Run {
  double accuracy = 0;
};

Run train_with_workers(int workers) {
  core::JobSpec job = core::parse_job_spec_file("configs/fashion-mnist-mlp.yaml");
  job.training.workers_per_node = workers;
  core::Model initial(job.model);
  initial.init(job.seed);
  MessageAudit audit(initial.num_params());
  core::LocalTrainingOptions options;
  options.output_path = testing::temp_dir() + "/w.dtm";
  options.evaluate_each_epoch = false;
  options.message_observer = [&](const core::EncodedMessage& m) { audit.add(m); };
  core::TrainingListener quiet;
  const core::TrainingResult r = core::train_local(job, quiet, options);

  INFO("workers " << workers);
  REQUIRE(r.workers == workers);
  REQUIRE(r.mode == core::TrainingMode::kGradientSharing);
  REQUIRE(r.messages == audit.messages());
  REQUIRE(r.messages >= 5 * 60000 / 64);  // one message per minibatch of every worker
  // Replicas agree after the queues drained, far inside one message element (tau).
  CHECK(r.agreement.replicas == workers);
  CHECK(r.agreement.relative_diff <= 1e-5);
  CHECK(r.agreement.max_abs_diff < 0.1 * audit.min_tau());
  // The saved replica is exactly initial - sum(messages), up to float rounding: nothing lost,
  // nothing applied twice.
  const core::ModelFile saved = core::read_model_file(options.output_path);
  double worst = 0;
  for (int64_t i = 0; i < initial.num_params(); ++i)
    worst = std::max(worst, std::fabs(double(saved.params[i]) -
                                      (double(initial.params()[i]) - audit.sum()[i])));
  CHECK(worst < 0.1 * audit.min_tau());
  WARN("W=" << workers << ": accuracy " << r.final_eval.accuracy() << ", relative difference "
            << r.agreement.relative_diff << ", largest element difference "
            << r.agreement.max_abs_diff << ", vs initial - sum(messages) " << worst
            << ", smallest tau " << audit.min_tau() << ", " << r.messages << " messages, "
            << r.message_bytes << " bytes");
  return {r.final_eval.accuracy()};
}

}  // namespace

TEST_CASE("W = 1, 2, 4 workers: replicas equal initial - sum(messages), accuracy within 1.5 points") {
  const Run one = train_with_workers(1);
  CHECK(one.accuracy >= 0.85);
  const Run two = train_with_workers(2);
  const Run four = train_with_workers(4);
  CHECK(two.accuracy >= one.accuracy - 0.015);
  CHECK(four.accuracy >= one.accuracy - 0.015);
}

}  // namespace dtrain
