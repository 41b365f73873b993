#include "core/layers/subsampling.h"

#include "core/util/error.h"

namespace dtrain::core {

SubsamplingLayer::SubsamplingLayer(const Shape& input_shape, const PoolOptions& options)
    : options_(options) {
  if (input_shape.size() != 3)
    throw UserError("subsampling needs [channels, height, width] input, got " +
                        shape_string(input_shape),
                    "put subsampling after a convolution, or set model.input to [c, h, w]");
  input_shape_ = input_shape;
  auto g = geometry(1);
  if (g.out_h() < 1 || g.out_w() < 1)
    throw UserError("subsampling window does not fit input " + shape_string(input_shape),
                    "use a smaller kernel or remove this layer");
  output_shape_ = {input_shape[0], g.out_h(), g.out_w()};
}

kernels::PoolGeometry SubsamplingLayer::geometry(int64_t batch) const {
  kernels::PoolGeometry g;
  g.batch = batch;
  g.channels = input_shape_[0];
  g.in_h = input_shape_[1];
  g.in_w = input_shape_[2];
  g.window = options_.window;
  g.max = options_.max;
  g.src_block = in_block_;
  g.dst_block = out_block_;
  return g;
}

kernels::Pool2dKernel& SubsamplingLayer::kernel_for(int64_t batch) {
  auto& slot = kernels_[batch];
  if (!slot) slot = backend_->make_pool2d(geometry(batch));
  return *slot;
}

void SubsamplingLayer::forward(const Tensor& in, Tensor& out, const ForwardMode&) {
  const int64_t batch = in.dim(0);
  out.resize(with_batch(batch, output_shape_));
  kernel_for(batch).forward(in.data(), out.data());
}

void SubsamplingLayer::backward(const Tensor& in, const Tensor&, const Tensor& dout, Tensor* din) {
  if (!din) return;
  din->resize(in.shape());
  kernel_for(in.dim(0)).backward(dout.data(), din->data());
}

}  // namespace dtrain::core
