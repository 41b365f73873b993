#pragma once
// A sequential model whose parameters, gradients and state are three flat vectors. Flat
// parameters are what gradient sharing encodes and what model files store.
#include <memory>
#include <vector>

#include "core/layers/layer.h"
#include "core/layers/output.h"
#include "core/spec/job_spec.h"

namespace dtrain::core {

class Model {
 public:
  // Builds the layers and allocates the buffers; parameters are zero until init() or a load.
  // The layers compute on `backend` (default: the process's, kernels::backend()).
  explicit Model(const ModelSpec& spec, kernels::Backend* backend = nullptr);
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Seeded weight initialisation: the same seed gives the same parameters.
  void init(uint64_t seed);

  const ModelSpec& spec() const { return spec_; }
  kernels::Backend& backend() const { return *backend_; }
  int64_t num_params() const { return params_.size(); }
  int64_t num_state() const { return state_.size(); }
  float* params() { return params_.data(); }
  const float* params() const { return params_.data(); }
  float* grads() { return grads_.data(); }
  const float* grads() const { return grads_.data(); }
  float* state() { return state_.data(); }
  const float* state() const { return state_.data(); }
  // Parameter runs with absolute offsets; `regularized` marks where L2 applies.
  const std::vector<ParamSegment>& segments() const { return segments_; }

  const Shape& input_shape() const { return spec_.input; }
  int64_t num_outputs() const { return output_->output_shape()[0]; }
  Loss loss() const { return output_->loss(); }
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }

  // Inference forward pass; returns the output activations [batch, outputs].
  const Tensor& predict(const Tensor& x);
  // Training forward + backward on one minibatch: fills grads() and returns the mean loss.
  double compute_gradients(const Tensor& x, const Tensor& targets, Rng& rng);

 private:
  void forward(const Tensor& x, const ForwardMode& mode);

  ModelSpec spec_;
  kernels::Backend* backend_;
  std::vector<std::unique_ptr<Layer>> layers_;
  OutputLayer* output_ = nullptr;
  Tensor params_, grads_, state_;
  std::vector<ParamSegment> segments_;
  std::vector<Tensor> activations_;  // activations_[i] = output of layer i
  Tensor delta_a_, delta_b_;         // ping-pong buffers for d(loss)/d(activation)
};

}  // namespace dtrain::core
