#pragma once
// Threshold algorithms (DESIGN.md §5): each worker owns one, its tau travels in every message,
// and the trainer averages tau across workers at each epoch end (set_tau).
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
  const std::string& algorithm() const { return spec_.algorithm; }

  // Feed the step just encoded: `sent` of `n` elements in `encoding`; sets tau for the next step.
  void observe(int64_t sent, int64_t n, Encoding encoding);

 private:
  ThresholdSpec spec_;
  float tau_;
};

}  // namespace dtrain::core
