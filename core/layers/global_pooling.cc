#include "core/layers/global_pooling.h"

#include "core/util/error.h"

namespace dtrain::core {

GlobalPoolingLayer::GlobalPoolingLayer(const Shape& input_shape, bool max) : max_(max) {
  if (input_shape.size() != 3)
    throw UserError("global_pooling needs [channels, height, width] input, got " +
                        shape_string(input_shape),
                    "put global_pooling after a convolution");
  input_shape_ = input_shape;
  output_shape_ = {input_shape[0]};
  plane_ = input_shape[1] * input_shape[2];
}

void GlobalPoolingLayer::forward(const Tensor& in, Tensor& out, const ForwardMode&) {
  const int64_t batch = in.dim(0), channels = input_shape_[0];
  out.resize({batch, channels});
  backend_->global_pool_forward(in.data(), out.data(), batch * channels, plane_, max_);
}

void GlobalPoolingLayer::backward(const Tensor& in, const Tensor&, const Tensor& dout,
                                  Tensor* din) {
  if (!din) return;
  din->resize(in.shape());
  backend_->global_pool_backward(in.data(), dout.data(), din->data(), in.dim(0) * input_shape_[0],
                                 plane_, max_);
}

}  // namespace dtrain::core
