#pragma once
// Inverted dropout: while training, each input survives with probability 1 - rate and is scaled
// by 1 / (1 - rate); inference passes inputs through unchanged.
#include "core/layers/layer.h"

namespace dtrain::core {

class DropoutLayer : public Layer {
 public:
  DropoutLayer(const Shape& input_shape, float rate);
  std::string kind() const override { return "dropout"; }
  void forward(const Tensor& in, Tensor& out, const ForwardMode& mode) override;
  void backward(const Tensor& in, const Tensor& out, const Tensor& dout, Tensor* din) override;

 protected:
  std::vector<Tensor*> scratch_tensors() override { return {&mask_}; }

 private:
  float rate_;
  Tensor mask_;
  bool last_training_ = false;
};

}  // namespace dtrain::core
