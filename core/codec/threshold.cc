#include "core/codec/threshold.h"

namespace dtrain::core {

ThresholdAlgorithm::ThresholdAlgorithm(const ThresholdSpec& spec)
    : spec_(spec), tau_(static_cast<float>(spec.initial)) {}

void ThresholdAlgorithm::observe(int64_t sent, int64_t n, Encoding encoding) {
  if (n <= 0 || spec_.algorithm == "fixed") return;
  // A bitmap says "more than 1/16 of the elements", whatever the exact count.
  const double sparsity = encoding == Encoding::kBitmap ? 1.0 / 16.0 : double(sent) / double(n);
  double low, high;
  if (spec_.algorithm == "target_sparsity") {
    low = high = spec_.target_sparsity;
  } else {
    low = spec_.min_sparsity;
    high = spec_.max_sparsity;
  }
  low *= density_scale_;
  high *= density_scale_;
  // Too few elements sent: lower tau; too many: raise it.
  if (sparsity < low) tau_ = static_cast<float>(tau_ * kDecay);
  else if (sparsity > high) tau_ = static_cast<float>(tau_ / kDecay);
}

}  // namespace dtrain::core
