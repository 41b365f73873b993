#pragma once
// Global max or average pooling: [channels, h, w] -> [channels].
#include <map>
#include <memory>

#include "core/layers/layer.h"

namespace dtrain::core {

class GlobalPoolingLayer : public Layer {
 public:
  GlobalPoolingLayer(const Shape& input_shape, bool max);
  std::string kind() const override { return "global_pooling"; }
  // Reads blocked input through a pooling kernel over the whole plane; writes [channels].
  Blocking blocking() const override { return Blocking::kFree; }
  void forward(const Tensor& in, Tensor& out, const ForwardMode& mode) override;
  void backward(const Tensor& in, const Tensor& out, const Tensor& dout, Tensor* din) override;

 private:
  kernels::Pool2dKernel& blocked_kernel_for(int64_t batch);

  bool max_;
  int64_t plane_;  // h * w
  std::map<int64_t, std::unique_ptr<kernels::Pool2dKernel>> blocked_kernels_;  // per batch
};

}  // namespace dtrain::core
