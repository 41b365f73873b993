#include "core/layers/dropout.h"

#include "core/util/check.h"

namespace dtrain::core {

DropoutLayer::DropoutLayer(const Shape& input_shape, float rate) : rate_(rate) {
  input_shape_ = input_shape;
  output_shape_ = input_shape;
}

void DropoutLayer::forward(const Tensor& in, Tensor& out, const ForwardMode& mode) {
  out.resize(in.shape());
  last_training_ = mode.training && rate_ > 0.0f;
  if (!last_training_) {
    out = in;
    return;
  }
  DTRAIN_CHECK(mode.rng != nullptr) << "dropout needs a random generator while training";
  mask_.resize(in.shape());
  const float keep_scale = 1.0f / (1.0f - rate_);
  for (int64_t i = 0; i < in.size(); ++i) {
    mask_[i] = mode.rng->uniform(0.0f, 1.0f) >= rate_ ? keep_scale : 0.0f;
    out[i] = in[i] * mask_[i];
  }
}

void DropoutLayer::backward(const Tensor& in, const Tensor&, const Tensor& dout, Tensor* din) {
  if (!din) return;
  din->resize(in.shape());
  for (int64_t i = 0; i < in.size(); ++i) (*din)[i] = last_training_ ? dout[i] * mask_[i] : dout[i];
}

}  // namespace dtrain::core
