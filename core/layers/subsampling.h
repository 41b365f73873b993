#pragma once
// Max or average pooling over [channels, height, width] examples (DL4J's "subsampling").
#include <map>
#include <memory>

#include "core/layers/layer.h"
#include "kernels/backend.h"

namespace dtrain::core {

struct PoolOptions {
  bool max = true;
  int64_t kernel_h = 2, kernel_w = 2;
  int64_t stride_h = 2, stride_w = 2;
  int64_t pad_h = 0, pad_w = 0;
};

class SubsamplingLayer : public Layer {
 public:
  SubsamplingLayer(const Shape& input_shape, const PoolOptions& options);
  std::string kind() const override { return "subsampling"; }
  void forward(const Tensor& in, Tensor& out, const ForwardMode& mode) override;
  void backward(const Tensor& in, const Tensor& out, const Tensor& dout, Tensor* din) override;

 private:
  kernels::PoolGeometry geometry(int64_t batch) const;
  kernels::Pool2dKernel& kernel_for(int64_t batch);

  PoolOptions options_;
  std::map<int64_t, std::unique_ptr<kernels::Pool2dKernel>> kernels_;
};

}  // namespace dtrain::core
