#include "core/train/gradient_rounds.h"

#include <algorithm>

#include "core/train/corrections.h"
#include "kernels/backend.h"

namespace dtrain::core {

GradientRounds::GradientRounds(int workers, int64_t num_params,
                               const CorrectionsSpec& corrections, NodeExchange* exchange)
    : workers_(std::max(1, workers)),
      n_(num_params),
      corrections_(corrections),
      exchange_(exchange),
      round_(workers_),
      parts_(size_t(workers_)),
      sum_(size_t(step_sum_values(num_params))),
      mean_(size_t(num_params)) {}

void GradientRounds::run_step(int64_t round) {
  // Weighted by examples, so a short last minibatch counts for what it holds; summed in
  // worker order, so the node's sum is the same bits every time.
  std::fill(sum_.begin(), sum_.end(), 0.f);
  float* sum = sum_.data();
  for (const Part& p : parts_) {
    if (p.gradient) {
      const float weight = float(p.examples);
      for (int64_t i = 0; i < n_; ++i) sum[i] += weight * p.gradient[i];
      sum[n_] += weight;
    }
    if (p.has_more) sum[n_ + 1] += 1.f;
  }
  if (exchange_) {
    try {
      exchange_->sum_over_nodes(sum, step_sum_values(n_), round);
    } catch (...) {
      // The other workers are released (NodeRound) and must not apply anything: no step.
      examples_ = 0.0;
      more_ = false;
      throw;
    }
  }
  examples_ = sum[n_];
  more_ = sum[n_ + 1] > 0.f;
  if (examples_ <= 0.0) return;
  const float inverse = float(1.0 / examples_);
  for (int64_t i = 0; i < n_; ++i) mean_[size_t(i)] = sum[i] * inverse;
  // The job's gradient is one gradient: clip_norm bounds it as one worker's would be.
  clip_gradient(corrections_, 1, kernels::backend(), mean_.data(), n_);
}

}  // namespace dtrain::core
