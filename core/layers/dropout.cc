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
    backend_->copy(out.data(), in.data(), in.size());
    return;
  }
  DTRAIN_CHECK(mode.rng != nullptr) << "dropout needs a random generator while training";
  mask_.resize(in.shape());
  // One draw from the worker's stream seeds this step's mask; the mask itself is counter-based
  // (kernels/random_bits.h), so every backend drops the same units.
  backend_->dropout_forward(in.data(), out.data(), mask_.data(), in.size(), rate_,
                            mode.rng->next());
}

void DropoutLayer::backward(const Tensor& in, const Tensor&, const Tensor& dout, Tensor* din) {
  if (!din) return;
  din->resize(in.shape());
  if (last_training_)
    backend_->multiply(dout.data(), mask_.data(), din->data(), in.size());
  else
    backend_->copy(din->data(), dout.data(), in.size());
}

}  // namespace dtrain::core
