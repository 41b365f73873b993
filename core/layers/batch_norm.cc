#include "core/layers/batch_norm.h"

#include <cmath>

namespace dtrain::core {

BatchNormLayer::BatchNormLayer(const Shape& input_shape, float decay, float eps,
                               Activation activation)
    : decay_(decay), eps_(eps), activation_(activation) {
  input_shape_ = input_shape;
  output_shape_ = input_shape;
  channels_ = input_shape.size() == 3 ? input_shape[0] : shape_size(input_shape);
  plane_ = input_shape.size() == 3 ? input_shape[1] * input_shape[2] : 1;
}

void BatchNormLayer::init_params(float* params, float* state, Rng&) const {
  for (int64_t c = 0; c < channels_; ++c) {
    params[c] = 1.0f;              // gamma
    params[channels_ + c] = 0.0f;  // beta
    state[c] = 0.0f;               // running mean
    state[channels_ + c] = 1.0f;   // running variance
  }
}

kernels::BatchNormArgs BatchNormLayer::args(const Tensor& in) {
  kernels::BatchNormArgs a;
  a.batch = in.dim(0);
  a.channels = channels_;
  a.plane = plane_;
  a.block = in_block_;
  a.eps = eps_;
  a.decay = decay_;
  a.x = in.data();
  a.gamma = params_;
  a.beta = params_ + channels_;
  a.running_mean = state_;
  a.running_var = state_ + channels_;
  saved_.resize({2 * channels_});
  a.save_mean = saved_.data();
  a.save_inv_std = saved_.data() + channels_;
  return a;
}

void BatchNormLayer::forward(const Tensor& in, Tensor& out, const ForwardMode& mode) {
  out.resize(in.shape());
  kernels::BatchNormArgs a = args(in);
  a.training = last_training_ = mode.training;
  a.y = out.data();
  backend_->batch_norm_forward(a);
  backend_->activation_forward(activation_, out.data(), a.batch, out.row_size());
}

void BatchNormLayer::backward(const Tensor& in, const Tensor& out, const Tensor& dout,
                              Tensor* din) {
  const Tensor& dy = before_activation(activation_, out, dout, dz_);
  if (din) din->resize(in.shape());
  kernels::BatchNormArgs a = args(in);
  a.training = last_training_;
  a.dy = dy.data();
  a.dx = din ? din->data() : nullptr;
  a.dgamma = grads_;
  a.dbeta = grads_ + channels_;
  backend_->batch_norm_backward(a);
}

}  // namespace dtrain::core
