#pragma once
// Dynamic loss scaling for fp16 training (training.precision: fp16), the scheme of NVIDIA's
// mixed-precision training and PyTorch's GradScaler: the loss gradient is multiplied by S before
// the backward pass, so small gradients survive fp16's range (smallest subnormal 2^-24), and the
// parameter gradients are divided by S before anything uses them. A step whose gradients came
// out infinite or NaN (S was too large: something overflowed 65504) is skipped and S halves;
// after `growth_interval` good steps in a row S doubles again. A loss that is itself infinite
// (an fp16 activation past 65504) counts as such a step too. bf16 has fp32's range and needs
// none of this. Unlike GradScaler, S stops at 1: a model that overflows even unscaled does not
// belong in fp16, and the worker stops after kGiveUpAfter skips in a row at S = 1.
#include <cstdint>

namespace dtrain::core {

class LossScaler {
 public:
  static constexpr float kInitialScale = 65536.f;  // 2^16, GradScaler's default
  static constexpr int64_t kGrowthInterval = 2000;
  static constexpr float kMinScale = 1.f;
  static constexpr float kMaxScale = 16777216.f;  // 2^24
  static constexpr int64_t kGiveUpAfter = 50;

  explicit LossScaler(float initial = kInitialScale, int64_t growth_interval = kGrowthInterval)
      : scale_(initial), growth_interval_(growth_interval) {}

  float scale() const { return scale_; }
  int64_t skipped() const { return skipped_; }
  // Every recent step overflowed even at the smallest scale: fp16 cannot train this model.
  bool hopeless() const { return scale_ <= kMinScale && skipped_in_a_row_ >= kGiveUpAfter; }

  // The verdict on one step's unscaled gradients: true when they are finite and the step
  // applies. Moves the scale for the next step either way.
  bool step_finite(bool finite) {
    if (!finite) {
      ++skipped_;
      ++skipped_in_a_row_;
      good_in_a_row_ = 0;
      if (scale_ > kMinScale) scale_ *= 0.5f;
      return false;
    }
    skipped_in_a_row_ = 0;
    if (++good_in_a_row_ >= growth_interval_) {
      good_in_a_row_ = 0;
      if (scale_ < kMaxScale) scale_ *= 2.f;
    }
    return true;
  }

 private:
  float scale_;
  int64_t growth_interval_;
  int64_t good_in_a_row_ = 0;
  int64_t skipped_ = 0;
  int64_t skipped_in_a_row_ = 0;
};

}  // namespace dtrain::core
