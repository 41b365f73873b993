#pragma once
// Threshold algorithms (docs/architecture/core.md, "The update"): each worker owns one, its tau
// travels in every message, and the trainer averages tau across workers at each epoch end
// (set_tau).
#include <cstdint>
#include <string>

#include "core/codec/message.h"
#include "core/spec/job_spec.h"

namespace dtrain::core {

class ThresholdAlgorithm {
 public:
  // 0.5^(1/20): twenty steps in the same direction halve or double tau.
  static constexpr double kDecay = 0.96593632892484568;

  explicit ThresholdAlgorithm(const ThresholdSpec& spec);

  float tau() const { return tau_; }
  void set_tau(float tau) { tau_ = tau; }
  // Sparsity warm-up: the density band (or target) is multiplied by `scale` >= 1 until
  // set back to 1 (core/train/corrections.h density_scale).
  void set_density_scale(double scale) { density_scale_ = scale; }
  // The top of the density band the algorithm aims at (what warm-up starts above).
  double max_density() const {
    return spec_.algorithm == "target_sparsity" ? spec_.target_sparsity : spec_.max_sparsity;
  }
  const std::string& algorithm() const { return spec_.algorithm; }

  // Feed the step just encoded: `sent` of `n` elements in `encoding`; sets tau for the next step.
  void observe(int64_t sent, int64_t n, Encoding encoding);

 private:
  ThresholdSpec spec_;
  float tau_;
  double density_scale_ = 1.0;
};

}  // namespace dtrain::core
