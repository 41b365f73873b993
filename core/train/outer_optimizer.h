#pragma once
// The outer optimizer of local steps (docs/architecture/core.md, "Local steps"): applies the
// round's pseudo-gradient (the mean of global - local over the nodes) to the global parameters.
// Nesterov momentum as PyTorch's SGD(nesterov=True) defines it, which DiLoCo uses:
//   buf = momentum * buf + g;  global -= learning_rate * (g + momentum * buf)
// `sgd` is the same with momentum 0 (learning rate 1: plain averaging of the replicas). Every
// node computes it in the same order on the same inputs, so the global parameters agree bit
// for bit.
#include <cstdint>
#include <vector>

#include "core/spec/job_spec.h"

namespace dtrain::core {

class OuterOptimizer {
 public:
  OuterOptimizer(const OuterOptimizerSpec& spec, int64_t num_params);

  // One outer step of `global` (num_params floats) with the pseudo-gradient `g`.
  void step(float* global, const float* g);

  // The momentum buffer (checkpoints, the epoch end's agreement).
  const std::vector<float>& momentum() const { return buffer_; }
  void set_momentum(const std::vector<float>& buffer);

 private:
  const float learning_rate_, momentum_;
  const bool nesterov_;
  const int64_t num_params_;
  std::vector<float> buffer_;  // empty with momentum 0
};

}  // namespace dtrain::core
