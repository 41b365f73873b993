// The ResNet-20 config (configs/fashion-mnist-resnet20.yaml) learns on Fashion-MNIST on the
// CPU: a short run of its own updater over real images, whose loss must fall well below where
// it started. (The full config trains at 400-500 samples/s here: docs/user-guide.md, "Graph
// models".)
#include <catch2/catch.hpp>

#include <cstring>

#include "core/model/model.h"
#include "core/spec/job_spec_parser.h"
#include "core/train/training_data.h"
#include "core/updaters/updater.h"

namespace dtrain {

TEST_CASE("ResNet-20 on Fashion-MNIST: the loss falls within 60 minibatches") {
  const core::JobSpec job = core::parse_job_spec_file("configs/fashion-mnist-resnet20.yaml");
  const core::TrainingData data = core::load_training_data(job);
  core::Model model(job.model);
  model.init(job.seed);
  auto updater = core::Updater::create(job.model.updater, job.model.l2, model.segments(),
                                       model.num_params());
  std::vector<float> step(static_cast<size_t>(model.num_params()));
  constexpr int64_t kBatch = 32, kSteps = 60;
  const int64_t row = data.train.features.row_size(), classes = 10;
  core::Tensor x(core::with_batch(kBatch, job.model.input)), y({kBatch, classes});
  core::Rng rng(job.seed);
  std::vector<double> losses;
  for (int64_t s = 0; s < kSteps; ++s) {
    const int64_t first = s * kBatch;  // a fresh slice each step: never the same examples twice
    std::memcpy(x.data(), data.train.features.row(first), sizeof(float) * kBatch * row);
    std::memcpy(y.data(), data.train.targets.row(first), sizeof(float) * kBatch * classes);
    losses.push_back(model.compute_gradients(x, y, rng));
    updater->compute_step(model.params(), model.grads(), step.data(), s);
    for (int64_t i = 0; i < model.num_params(); ++i) model.params()[i] -= step[i];
  }
  auto mean = [&](size_t from, size_t to) {
    double sum = 0;
    for (size_t i = from; i < to; ++i) sum += losses[i];
    return sum / double(to - from);
  };
  const double start = mean(0, 10), end = mean(kSteps - 10, kSteps);
  INFO("mean loss of the first 10 minibatches " << start << ", of the last 10 " << end);
  CHECK(start > 1.5);        // about ln(10) = 2.3 untrained
  CHECK(end < 0.6 * start);  // measured: 2.39 -> 0.84
}

}  // namespace dtrain
