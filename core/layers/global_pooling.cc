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

kernels::Pool2dKernel& GlobalPoolingLayer::blocked_kernel_for(int64_t batch) {
  auto& slot = blocked_kernels_[batch];
  if (!slot) {
    kernels::PoolGeometry g;
    g.batch = batch;
    g.channels = input_shape_[0];
    g.in_h = input_shape_[1];
    g.in_w = input_shape_[2];
    g.window = {g.in_h, g.in_w, 1, 1, 0, 0};  // the whole plane: [batch, channels, 1, 1]
    g.max = max_;
    g.src_block = in_block_;
    slot = backend_->make_pool2d(g);
  }
  return *slot;
}

void GlobalPoolingLayer::forward(const Tensor& in, Tensor& out, const ForwardMode&) {
  const int64_t batch = in.dim(0), channels = input_shape_[0];
  out.resize({batch, channels});
  if (in_block_ > 0)
    blocked_kernel_for(batch).forward(in.data(), out.data());
  else
    backend_->global_pool_forward(in.data(), out.data(), batch * channels, plane_, max_);
}

void GlobalPoolingLayer::backward(const Tensor& in, const Tensor&, const Tensor& dout,
                                  Tensor* din) {
  if (!din) return;
  din->resize(in.shape());
  if (in_block_ > 0)
    blocked_kernel_for(in.dim(0)).backward(dout.data(), din->data());
  else
    backend_->global_pool_backward(in.data(), dout.data(), din->data(),
                                   in.dim(0) * input_shape_[0], plane_, max_);
}

}  // namespace dtrain::core
