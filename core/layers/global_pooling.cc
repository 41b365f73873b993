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
  if (max_) argmax_.resize(batch * channels);
  for (int64_t i = 0; i < batch * channels; ++i) {
    const float* p = in.data() + i * plane_;
    if (max_) {
      int64_t best = 0;
      for (int64_t j = 1; j < plane_; ++j)
        if (p[j] > p[best]) best = j;
      argmax_[i] = best;
      out[i] = p[best];
    } else {
      float sum = 0.0f;
      for (int64_t j = 0; j < plane_; ++j) sum += p[j];
      out[i] = sum / static_cast<float>(plane_);
    }
  }
}

void GlobalPoolingLayer::backward(const Tensor& in, const Tensor&, const Tensor& dout,
                                  Tensor* din) {
  if (!din) return;
  din->resize(in.shape());
  const int64_t n = in.dim(0) * input_shape_[0];
  for (int64_t i = 0; i < n; ++i) {
    float* d = din->data() + i * plane_;
    if (max_) {
      for (int64_t j = 0; j < plane_; ++j) d[j] = 0.0f;
      d[argmax_[i]] = dout[i];
    } else {
      const float g = dout[i] / static_cast<float>(plane_);
      for (int64_t j = 0; j < plane_; ++j) d[j] = g;
    }
  }
}

}  // namespace dtrain::core
