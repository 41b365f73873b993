#pragma once
// Fully connected layer: out = act(in · W + b), W stored [in, out]. Inputs of any rank are
// flattened per example (a dense layer after a convolution needs no explicit flatten).
#include "core/layers/activation.h"
#include "core/layers/layer.h"
#include "core/layers/weight_init.h"

namespace dtrain::core {

class DenseLayer : public Layer {
 public:
  DenseLayer(const Shape& input_shape, int64_t units, Activation activation, WeightInit init);
  std::string kind() const override { return "dense"; }

  int64_t num_params() const override { return in_ * out_ + out_; }
  std::vector<ParamSegment> param_segments() const override;
  void init_params(float* params, float* state, Rng& rng) const override;

  void forward(const Tensor& in, Tensor& out, const ForwardMode& mode) override;
  void backward(const Tensor& in, const Tensor& out, const Tensor& dout, Tensor* din) override;
  // The linear part of backward, from d(loss)/d(z) (z = pre-activation).
  void backward_from_preactivation(const Tensor& in, const Tensor& dz, Tensor* din);

  Activation activation() const { return activation_; }

 protected:
  std::vector<Tensor*> scratch_tensors() override { return {&dz_}; }

 protected:
  int64_t in_, out_;
  Activation activation_;
  WeightInit init_;
  Tensor dz_;
};

}  // namespace dtrain::core
