#include "core/train/step_timing.h"

#include <algorithm>
#include <chrono>

#include "core/layers/layer.h"
#include "core/model/model.h"
#include "core/train/batch_split.h"
#include "core/train/sync_choice.h"
#include "core/util/rng.h"

namespace dtrain::core {

StepTiming time_training_step(const JobSpec& job, int workers) {
  constexpr int kTimedPasses = 3;
  Model model(job.model);
  model.init(job.seed);
  const int64_t batch = worker_batch(job.training, workers).per_worker;
  Rng rng(job.seed);
  Tensor x(with_batch(batch, job.model.input));
  for (int64_t i = 0; i < x.size(); ++i) x[i] = rng.uniform(-1.0f, 1.0f);
  const int64_t k = model.num_outputs();
  Tensor y({batch, k});
  for (int64_t r = 0; r < batch; ++r)
    for (int64_t c = 0; c < k; ++c) y[r * k + c] = c == r % k ? 1.0f : 0.0f;
  // A model whose step takes seconds here (one sized for GPUs) is timed once: the others wait
  // for the choice, and a warm-up matters little at that size.
  constexpr double kLongStepSeconds = 2.0;
  double fastest = 0.0;
  for (int pass = 0; pass <= kTimedPasses; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    model.compute_gradients(x, y, rng);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (pass == 0 && s > kLongStepSeconds) {
      fastest = s;
      break;
    }
    if (pass == 1 || (pass > 1 && s < fastest)) fastest = s;  // pass 0 warms up
  }
  const float* gradient = model.grads();
  return StepTiming{fastest, model.num_params(),
                    round_message_bytes(job.training.sync.local, gradient, model.num_params())};
}

}  // namespace dtrain::core
