#pragma once
// Merge layers of graph models (docs/architecture/core.md, "Graph models"): they read two or more
// layers' outputs.
//   add:    element-wise sum of inputs of one shape, then an optional activation (the join of a
//           residual block: relu(branch + shortcut));
//   concat: the inputs side by side along the first per-example axis (channels for images,
//           features for vectors); the other axes must agree.
// The model (core/model/model.h) calls forward_merge / backward_merge; the one-input
// forward / backward of Layer do not apply to them.
#include <vector>

#include "core/layers/activation.h"
#include "core/layers/layer.h"

namespace dtrain::core {

class MergeLayer : public Layer {
 public:
  const std::vector<Shape>& input_shapes() const { return input_shapes_; }

  virtual void forward_merge(const std::vector<const Tensor*>& ins, Tensor& out) = 0;
  // Writes d(loss)/d(input k) into dins[k]; a null entry needs no gradient (the model input).
  virtual void backward_merge(const Tensor& out, const Tensor& dout,
                              const std::vector<Tensor*>& dins) = 0;

  void forward(const Tensor&, Tensor&, const ForwardMode&) final {
    DTRAIN_CHECK(false) << kind() << " merges several inputs: call forward_merge";
  }
  void backward(const Tensor&, const Tensor&, const Tensor&, Tensor*) final {
    DTRAIN_CHECK(false) << kind() << " merges several inputs: call backward_merge";
  }

 protected:
  std::vector<Shape> input_shapes_;
};

class AddLayer : public MergeLayer {
 public:
  // Throws UserError when the shapes differ.
  AddLayer(const std::vector<Shape>& input_shapes, Activation activation);
  std::string kind() const override { return "add"; }
  Blocking blocking() const override { return Blocking::kPreserves; }  // element-wise
  void forward_merge(const std::vector<const Tensor*>& ins, Tensor& out) override;
  void backward_merge(const Tensor& out, const Tensor& dout,
                      const std::vector<Tensor*>& dins) override;

 private:
  Activation activation_;
};

class ConcatLayer : public MergeLayer {
 public:
  // Throws UserError when the inputs differ in rank or in any axis but the first.
  explicit ConcatLayer(const std::vector<Shape>& input_shapes);
  std::string kind() const override { return "concat"; }
  void forward_merge(const std::vector<const Tensor*>& ins, Tensor& out) override;
  void backward_merge(const Tensor& out, const Tensor& dout,
                      const std::vector<Tensor*>& dins) override;
};

}  // namespace dtrain::core
