#include "core/layers/flatten.h"

namespace dtrain::core {

FlattenLayer::FlattenLayer(const Shape& input_shape) {
  input_shape_ = input_shape;
  output_shape_ = {shape_size(input_shape)};
}

void FlattenLayer::forward(const Tensor& in, Tensor& out, const ForwardMode&) {
  out.resize({in.dim(0), in.row_size()});
  backend_->copy(out.data(), in.data(), in.size());
}

void FlattenLayer::backward(const Tensor& in, const Tensor&, const Tensor& dout, Tensor* din) {
  if (!din) return;
  din->resize(in.shape());
  backend_->copy(din->data(), dout.data(), dout.size());
}

}  // namespace dtrain::core
