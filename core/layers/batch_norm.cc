#include "core/layers/batch_norm.h"

#include <cmath>

namespace dtrain::core {

BatchNormLayer::BatchNormLayer(const Shape& input_shape, float decay, float eps)
    : decay_(decay), eps_(eps) {
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

void BatchNormLayer::forward(const Tensor& in, Tensor& out, const ForwardMode& mode) {
  const int64_t batch = in.dim(0);
  const int64_t stride = channels_ * plane_;
  const double count = static_cast<double>(batch * plane_);
  out.resize(in.shape());
  xhat_.resize(in.shape());
  inv_std_.resize(channels_);
  last_training_ = mode.training;
  const float* gamma = params_;
  const float* beta = params_ + channels_;
  float* running_mean = state_;
  float* running_var = state_ + channels_;
  for (int64_t c = 0; c < channels_; ++c) {
    float mean, var;
    if (mode.training) {
      double sum = 0.0, sq = 0.0;
      for (int64_t b = 0; b < batch; ++b) {
        const float* x = in.data() + b * stride + c * plane_;
        for (int64_t j = 0; j < plane_; ++j) sum += x[j];
      }
      mean = static_cast<float>(sum / count);
      for (int64_t b = 0; b < batch; ++b) {
        const float* x = in.data() + b * stride + c * plane_;
        for (int64_t j = 0; j < plane_; ++j) sq += (x[j] - mean) * double(x[j] - mean);
      }
      var = static_cast<float>(sq / count);
      running_mean[c] = decay_ * running_mean[c] + (1.0f - decay_) * mean;
      running_var[c] = decay_ * running_var[c] + (1.0f - decay_) * var;
    } else {
      mean = running_mean[c];
      var = running_var[c];
    }
    const float inv_std = 1.0f / std::sqrt(var + eps_);
    inv_std_[c] = inv_std;
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t base = b * stride + c * plane_;
      for (int64_t j = 0; j < plane_; ++j) {
        const float xh = (in[base + j] - mean) * inv_std;
        xhat_[base + j] = xh;
        out[base + j] = gamma[c] * xh + beta[c];
      }
    }
  }
}

void BatchNormLayer::backward(const Tensor& in, const Tensor&, const Tensor& dout, Tensor* din) {
  const int64_t batch = in.dim(0);
  const int64_t stride = channels_ * plane_;
  const float count = static_cast<float>(batch * plane_);
  const float* gamma = params_;
  if (din) din->resize(in.shape());
  for (int64_t c = 0; c < channels_; ++c) {
    double dgamma = 0.0, dbeta = 0.0;
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t base = b * stride + c * plane_;
      for (int64_t j = 0; j < plane_; ++j) {
        dgamma += dout[base + j] * xhat_[base + j];
        dbeta += dout[base + j];
      }
    }
    grads_[c] = static_cast<float>(dgamma);
    grads_[channels_ + c] = static_cast<float>(dbeta);
    if (!din) continue;
    const float scale = gamma[c] * inv_std_[c];
    const float mean_dy = static_cast<float>(dbeta) / count;
    const float mean_dy_xhat = static_cast<float>(dgamma) / count;
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t base = b * stride + c * plane_;
      for (int64_t j = 0; j < plane_; ++j) {
        (*din)[base + j] =
            last_training_
                ? scale * (dout[base + j] - mean_dy - xhat_[base + j] * mean_dy_xhat)
                : scale * dout[base + j];
      }
    }
  }
}

}  // namespace dtrain::core
