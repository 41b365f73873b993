#include "core/layers/conv2d.h"

#include <cstring>

#include "core/util/error.h"

namespace dtrain::core {

Conv2dLayer::Conv2dLayer(const Shape& input_shape, const Conv2dOptions& options, WeightInit init)
    : options_(options), init_(init) {
  if (input_shape.size() != 3)
    throw UserError("convolution needs [channels, height, width] input, got " +
                        shape_string(input_shape),
                    "set model.input to [channels, height, width], e.g. [1, 28, 28]");
  input_shape_ = input_shape;
  checked_product(checked_product(options.filters, input_shape[0], "a convolution's weights"),
                  checked_product(options.window.kernel_h, options.window.kernel_w,
                                  "a convolution's kernel"),
                  "a convolution's weights");
  const kernels::ConvGeometry g = geometry(1);
  if (g.out_h() < 1 || g.out_w() < 1)
    throw UserError("convolution kernel " + std::to_string(options.window.kernel_h) + "x" +
                        std::to_string(options.window.kernel_w) + " does not fit input " +
                        shape_string(input_shape),
                    "use a smaller kernel, add padding, or remove a pooling layer before it");
  output_shape_ = {options.filters, g.out_h(), g.out_w()};
}

std::vector<ParamSegment> Conv2dLayer::param_segments() const {
  return {{0, weight_count(), true}, {weight_count(), options_.filters, false}};
}

void Conv2dLayer::init_params(float* params, float*, Rng& rng) const {
  const int64_t receptive = options_.window.kernel_h * options_.window.kernel_w;
  init_weights(init_, params, weight_count(), input_shape_[0] * receptive,
               options_.filters * receptive, rng);
  std::memset(params + weight_count(), 0, sizeof(float) * options_.filters);
}

kernels::ConvGeometry Conv2dLayer::geometry(int64_t batch) const {
  kernels::ConvGeometry g;
  g.batch = batch;
  g.in_channels = input_shape_[0];
  g.in_h = input_shape_[1];
  g.in_w = input_shape_[2];
  g.out_channels = options_.filters;
  g.window = options_.window;
  g.src_block = in_block_;
  g.dst_block = out_block_;
  return g;
}

kernels::Conv2dKernel& Conv2dLayer::kernel_for(int64_t batch) {
  auto& slot = kernels_[batch];
  if (!slot) slot = backend_->make_conv2d(geometry(batch));
  return *slot;
}

void Conv2dLayer::forward(const Tensor& in, Tensor& out, const ForwardMode&) {
  const int64_t batch = in.dim(0);
  out.resize(with_batch(batch, output_shape_));
  kernel_for(batch).forward(in.data(), params_, params_ + weight_count(), out.data());
  backend_->activation_forward(options_.activation, out.data(), batch, out.row_size());
}

void Conv2dLayer::backward(const Tensor& in, const Tensor& out, const Tensor& dout, Tensor* din) {
  const int64_t batch = in.dim(0);
  // Without an activation d(loss)/dz is dout itself: no copy (ResNet's convolutions).
  const float* dz = before_activation(options_.activation, out, dout, dz_).data();
  auto& kernel = kernel_for(batch);
  kernel.backward_weights(in.data(), dz, grads_, grads_ + weight_count());
  if (din) {
    din->resize(in.shape());
    kernel.backward_data(dz, params_, din->data());
  }
}

}  // namespace dtrain::core
