#pragma once
// Batch normalisation per feature ([d] input) or per channel ([c, h, w] input). Training uses
// the batch's statistics and updates running averages (model state, not trained parameters);
// inference uses the running averages. An activation may follow (conv -> batch norm -> relu, as
// residual networks are written).
#include "core/layers/activation.h"
#include "core/layers/layer.h"

namespace dtrain::core {

class BatchNormLayer : public Layer {
 public:
  explicit BatchNormLayer(const Shape& input_shape, float decay = 0.9f, float eps = 1e-5f,
                          Activation activation = Activation::kIdentity);
  std::string kind() const override { return "batch_norm"; }
  Blocking blocking() const override { return Blocking::kPreserves; }

  // gamma[c], beta[c]; state: running mean[c], running variance[c].
  int64_t num_params() const override { return 2 * channels_; }
  int64_t num_state() const override { return 2 * channels_; }
  std::vector<ParamSegment> param_segments() const override { return {{0, 2 * channels_, false}}; }
  void init_params(float* params, float* state, Rng& rng) const override;

  void forward(const Tensor& in, Tensor& out, const ForwardMode& mode) override;
  void backward(const Tensor& in, const Tensor& out, const Tensor& dout, Tensor* din) override;

 protected:
  std::vector<Tensor*> scratch_tensors() override { return {&saved_, &dz_}; }

 private:
  // The arguments both passes share (saved_ is resized, and kept, across the pair).
  kernels::BatchNormArgs args(const Tensor& in);
  // Element (example b, channel c, position j) lives at b*channels_*plane_ + c*plane_ + j, or
  // where the blocked layout puts it (kernels/op_args.h).
  int64_t channels_, plane_;
  float decay_, eps_;
  Activation activation_;
  Tensor dz_;     // d(loss)/d(normalised output) when an activation follows
  Tensor saved_;  // the batch's mean [channels] and 1/std [channels], from forward for backward
  bool last_training_ = false;
};

}  // namespace dtrain::core
