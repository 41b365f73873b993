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
  // Host views for what runs on the CPU around training (snapshots, averaging, checks). On a
  // host backend they are params() and state(); on a GPU they download into a copy the model
  // keeps, valid until the next call. set_* write host values into the model's memory.
  bool on_host() const { return params_.on_host(); }
  const float* host_params() const;
  const float* host_state() const;
  void set_params(const float* host) { params_.copy_from_host(host); }
  void set_state(const float* host) { state_.copy_from_host(host); }

  // Parameter runs with absolute offsets; `regularized` marks where L2 applies.
  const std::vector<ParamSegment>& segments() const { return segments_; }

  const Shape& input_shape() const { return spec_.input; }
  int64_t num_outputs() const { return output_->output_shape()[0]; }
  Loss loss() const { return output_->loss(); }
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }

  // Inference forward pass on host inputs; returns the output activations [batch, outputs] in
  // host memory.
  const Tensor& predict(const Tensor& x);
  // Training forward + backward on one minibatch (host tensors, copied to the model's device
  // when it has one): fills grads() and returns the mean loss.
  double compute_gradients(const Tensor& x, const Tensor& targets, Rng& rng);

 private:
  void forward(const Tensor& x, const ForwardMode& mode);
  const Tensor& on_device(const Tensor& host, Tensor& staging) const;

  ModelSpec spec_;
  kernels::Backend* backend_;
  std::vector<std::unique_ptr<Layer>> layers_;
  OutputLayer* output_ = nullptr;
  Tensor params_, grads_, state_;
  std::vector<ParamSegment> segments_;
  std::vector<Tensor> activations_;  // activations_[i] = output of layer i
  Tensor delta_a_, delta_b_;         // ping-pong buffers for d(loss)/d(activation)
  Tensor input_, targets_;           // device copies of a minibatch (GPU models only)
  Tensor host_output_;               // predict()'s result, downloaded (GPU models only)
  mutable std::vector<float> host_params_, host_state_;
};

}  // namespace dtrain::core
