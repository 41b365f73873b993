#pragma once
// Global max or average pooling: [channels, h, w] -> [channels].
#include "core/layers/layer.h"

namespace dtrain::core {

class GlobalPoolingLayer : public Layer {
 public:
  GlobalPoolingLayer(const Shape& input_shape, bool max);
  std::string kind() const override { return "global_pooling"; }
  void forward(const Tensor& in, Tensor& out, const ForwardMode& mode) override;
  void backward(const Tensor& in, const Tensor& out, const Tensor& dout, Tensor* din) override;

 private:
  bool max_;
  int64_t plane_;  // h * w
};

}  // namespace dtrain::core
