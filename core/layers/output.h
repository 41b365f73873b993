#pragma once
// The output layer: a dense layer whose activation feeds a loss. The model starts backward
// here with the loss's delta instead of an upstream gradient.
#include "core/layers/dense.h"
#include "core/layers/loss.h"

namespace dtrain::core {

class OutputLayer : public DenseLayer {
 public:
  OutputLayer(const Shape& input_shape, int64_t units, Activation activation, Loss loss,
              WeightInit init)
      : DenseLayer(input_shape, units, activation, init), loss_(loss) {}
  std::string kind() const override { return "output"; }
  Loss loss() const { return loss_; }

  // Mean loss of the last forward's outputs against targets; runs the layer's backward and
  // writes d(loss)/d(in) into din when given. Every gradient of the backward pass is
  // multiplied by loss_scale (fp16 loss scaling; the loss returned is not).
  double loss_backward(const Tensor& in, const Tensor& out, const Tensor& targets, Tensor* din,
                       float loss_scale = 1.f) {
    double value = loss_and_delta(*backend_, loss_, activation_, out, targets, dz_);
    if (loss_scale != 1.f) backend_->scale(dz_.data(), dz_.size(), loss_scale);
    backward_from_preactivation(in, dz_, din);
    return value;
  }

 private:
  Loss loss_;
};

}  // namespace dtrain::core
