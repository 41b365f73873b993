#pragma once
// Max or average pooling over [channels, height, width] examples (DL4J's "subsampling").
#include <map>
#include <memory>

#include "core/layers/layer.h"
#include "kernels/backend.h"

namespace dtrain::core {

struct PoolOptions {
  bool max = true;
  kernels::Window2d window;
};

class SubsamplingLayer : public Layer {
 public:
  SubsamplingLayer(const Shape& input_shape, const PoolOptions& options);
  std::string kind() const override { return "subsampling"; }
  Blocking blocking() const override { return Blocking::kFree; }
  void forward(const Tensor& in, Tensor& out, const ForwardMode& mode) override;
  void backward(const Tensor& in, const Tensor& out, const Tensor& dout, Tensor* din) override;

 private:
  kernels::PoolGeometry geometry(int64_t batch) const;
  kernels::Pool2dKernel& kernel_for(int64_t batch);

  PoolOptions options_;
  std::map<int64_t, std::unique_ptr<kernels::Pool2dKernel>> kernels_;
};

}  // namespace dtrain::core
