#include "core/train/outer_optimizer.h"

#include "core/util/check.h"

namespace dtrain::core {

OuterOptimizer::OuterOptimizer(const OuterOptimizerSpec& spec, int64_t num_params)
    : learning_rate_(static_cast<float>(spec.learning_rate)),
      momentum_(static_cast<float>(spec.momentum)),
      nesterov_(spec.type == "nesterov"),
      num_params_(num_params),
      buffer_(momentum_ > 0.f ? size_t(num_params) : 0, 0.f) {}

void OuterOptimizer::step(float* global, const float* g) {
  if (buffer_.empty()) {  // momentum 0: plain SGD on the pseudo-gradient
    for (int64_t i = 0; i < num_params_; ++i) global[i] -= learning_rate_ * g[i];
    return;
  }
  for (int64_t i = 0; i < num_params_; ++i) {
    buffer_[i] = momentum_ * buffer_[i] + g[i];
    const float direction = nesterov_ ? g[i] + momentum_ * buffer_[i] : buffer_[i];
    global[i] -= learning_rate_ * direction;
  }
}

void OuterOptimizer::set_momentum(const std::vector<float>& buffer) {
  DTRAIN_CHECK(buffer.size() == buffer_.size());
  buffer_ = buffer;
}

}  // namespace dtrain::core
