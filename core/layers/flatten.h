#pragma once
// [channels, height, width] -> [channels * height * width], for a graph that feeds a feature
// map into a vector merge or a dense branch explicitly. (Dense layers flatten their input
// themselves; this layer makes the step visible and lets concat join maps with vectors.)
#include "core/layers/layer.h"

namespace dtrain::core {

class FlattenLayer : public Layer {
 public:
  explicit FlattenLayer(const Shape& input_shape);
  std::string kind() const override { return "flatten"; }
  void forward(const Tensor& in, Tensor& out, const ForwardMode& mode) override;
  void backward(const Tensor& in, const Tensor& out, const Tensor& dout, Tensor* din) override;
};

}  // namespace dtrain::core
