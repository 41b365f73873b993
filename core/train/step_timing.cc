#include "core/train/step_timing.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "core/codec/codec_engine.h"
#include "core/layers/layer.h"
#include "core/model/model.h"
#include "core/train/batch_split.h"
#include "core/train/local_steps.h"
#include "core/train/sync_choice.h"
#include "core/train/sync_workloads.h"
#include "core/util/rng.h"

namespace dtrain::core {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The faster of two runs of `work` (the first may pay for page faults), in seconds; `prepare`
// runs untimed before each.
template <typename Prepare, typename Work>
double fastest_of_two(Prepare prepare, Work work) {
  double fastest = 0.0;
  for (int pass = 0; pass < 2; ++pass) {
    prepare();
    const auto start = std::chrono::steady_clock::now();
    work(pass);
    const double s = seconds_since(start);
    if (pass == 0 || s < fastest) fastest = s;
  }
  return fastest;
}

double time_local_round(const JobSpec& job, int64_t n) {
  LocalRoundWork work(job, n);
  return fastest_of_two([&] { work.prepare(); }, [&](int round) { work.run(round); });
}

double time_part_decode(const JobSpec& job, int64_t n) {
  PartDecodeWork work(job, n);
  return fastest_of_two([] {}, [&](int) { work.run(); });
}

double time_sharing_step(const JobSpec& job, int64_t n, int others) {
  SharingStepWork work(job, n, others);
  return fastest_of_two([&] { work.prepare(); }, [&](int) { work.run(); });
}

}  // namespace

StepComputer::StepComputer(const JobSpec& job, int workers)
    : model_(job.model), rng_(job.seed) {
  model_.init(job.seed);
  const int64_t batch = worker_batch(job.training, workers).per_worker;
  x_ = Tensor(with_batch(batch, job.model.input));
  for (int64_t i = 0; i < x_.size(); ++i) x_[i] = rng_.uniform(-1.0f, 1.0f);
  const int64_t k = model_.num_outputs();
  y_ = Tensor({batch, k});
  for (int64_t r = 0; r < batch; ++r)
    for (int64_t c = 0; c < k; ++c) y_[r * k + c] = c == r % k ? 1.0f : 0.0f;
}

double StepComputer::step() {
  const auto start = std::chrono::steady_clock::now();
  model_.compute_gradients(x_, y_, rng_);
  return seconds_since(start);
}

StepTiming time_training_step(const JobSpec& job, int workers) {
  constexpr int kTimedPasses = 3;
  StepComputer computer(job, workers);
  // A model whose step takes seconds here (one sized for GPUs) is timed once: the others wait
  // for the choice, and a warm-up matters little at that size.
  constexpr double kLongStepSeconds = 2.0;
  double fastest = 0.0;
  for (int pass = 0; pass <= kTimedPasses; ++pass) {
    const double s = computer.step();
    if (pass == 0 && s > kLongStepSeconds) {
      fastest = s;
      break;
    }
    if (pass == 1 || (pass > 1 && s < fastest)) fastest = s;  // pass 0 warms up
  }
  const int64_t n = computer.num_params();
  // The codec's work grows with the elements: timed on at most kRoundSample of them and
  // scaled, so that a large model costs neither the memory of a dozen copies of its
  // parameters nor seconds before training.
  const int64_t m = std::min(n, kRoundSample);
  const double scale = double(n) / double(std::max<int64_t>(m, 1));
  return StepTiming{fastest,
                    n,
                    pseudo_gradient_round_bytes(job.training.sync.local, n),
                    scale * time_local_round(job, m),
                    scale * time_part_decode(job, m),
                    scale * time_sharing_step(job, m, workers - 1)};
}

}  // namespace dtrain::core
