#pragma once
// 2D convolution over [channels, height, width] examples, followed by an activation.
// Weights [out, in, kh, kw], bias [out]. One backend kernel per batch size (the last minibatch
// of an epoch is usually smaller).
#include <map>
#include <memory>

#include "core/layers/activation.h"
#include "core/layers/layer.h"
#include "core/layers/weight_init.h"
#include "kernels/backend.h"

namespace dtrain::core {

struct Conv2dOptions {
  int64_t filters = 0;
  kernels::Window2d window;
  Activation activation = Activation::kIdentity;
};

class Conv2dLayer : public Layer {
 public:
  Conv2dLayer(const Shape& input_shape, const Conv2dOptions& options, WeightInit init);
  std::string kind() const override { return "convolution"; }
  Blocking blocking() const override { return Blocking::kFree; }

  int64_t num_params() const override { return weight_count() + options_.filters; }
  std::vector<ParamSegment> param_segments() const override;
  void init_params(float* params, float* state, Rng& rng) const override;

  void forward(const Tensor& in, Tensor& out, const ForwardMode& mode) override;
  void backward(const Tensor& in, const Tensor& out, const Tensor& dout, Tensor* din) override;

 protected:
  std::vector<Tensor*> scratch_tensors() override { return {&dz_}; }

 private:
  int64_t weight_count() const {
    return options_.filters * input_shape_[0] * options_.window.kernel_h *
           options_.window.kernel_w;
  }
  kernels::ConvGeometry geometry(int64_t batch) const;
  kernels::Conv2dKernel& kernel_for(int64_t batch);

  Conv2dOptions options_;
  WeightInit init_;
  std::map<int64_t, std::unique_ptr<kernels::Conv2dKernel>> kernels_;
  Tensor dz_;
};

}  // namespace dtrain::core
