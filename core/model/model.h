#pragma once
// A model (a stack of layers, or a graph of them: model_graph.h) whose parameters, gradients
// and state are three flat vectors. Flat parameters are what gradient sharing encodes and what
// model files store.
#include <functional>
#include <memory>
#include <vector>

#include "core/layers/layer.h"
#include "core/layers/merge.h"
#include "core/layers/output.h"
#include "core/model/model_graph.h"
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
  const std::vector<std::unique_ptr<Layer>>& layers() const { return graph_.layers; }

  // Inference forward pass on host inputs; returns the output activations [batch, outputs] in
  // host memory.
  const Tensor& predict(const Tensor& x);
  // Training forward + backward on one minibatch (host tensors, copied to the model's device
  // when it has one): fills grads() and returns the mean loss. loss_scale (fp16 training,
  // core/train/loss_scaler.h) multiplies the loss gradient before the backward pass and
  // divides the parameter gradients after it; the loss returned is unscaled.
  //
  // `ready`, when given, hears during the backward pass each time more of grads() is final: every
  // gradient at and past the offset it is called with (a host model with loss_scale 1 and a
  // finite loss; any other hears nothing). Dense all-reduce sends those while the rest is
  // computed (core/train/gradient_buckets.h).
  using GradientsReady = std::function<void(int64_t ready_from)>;
  double compute_gradients(const Tensor& x, const Tensor& targets, Rng& rng,
                           float loss_scale = 1.f, const GradientsReady* ready = nullptr);
  // Where `ready` is called, in the order the backward pass reaches them: after the output
  // layer's backward and after each other layer's, the lowest offset from which every gradient is
  // final (a layer's parameters follow those of the layers before it, so the pass finishes the
  // flat gradient from its end). The last is 0.
  const std::vector<int64_t>& backward_frontiers() const { return frontiers_; }

 private:
  // Tells every layer the layouts of its input and output (core/model/layout_plan.h).
  void plan_layouts();
  void forward(const Tensor& x, const ForwardMode& mode);
  const Tensor& on_device(const Tensor& host, Tensor& staging) const;
  // What layer index j (or kModelInput) outputs in the current pass.
  const Tensor& output_of(int j, const Tensor& x) const {
    return j == kModelInput ? x : activations_[static_cast<size_t>(j)];
  }
  // Where a layer's backward writes d(loss)/d(input slot `k`) for input j: straight into
  // deltas_[j] for the first writer of a pass, else into a scratch that add_into then sums in.
  Tensor* gradient_slot(int j, size_t k);
  void add_into(int j, Tensor* slot);
  void backward_layer(int i, const Tensor& x);
  // frontiers_, from the layers' parameter offsets and the backward order.
  void plan_frontiers();

  ModelSpec spec_;
  kernels::Backend* backend_;
  ModelGraph graph_;
  std::vector<MergeLayer*> merges_;  // per layer: itself when it is an add or concat
  OutputLayer* output_ = nullptr;
  Tensor params_, grads_, state_;
  std::vector<ParamSegment> segments_;
  std::vector<int64_t> frontiers_;   // per backward position (backward_frontiers())
  std::vector<Tensor> activations_;  // activations_[i] = output of layer i
  std::vector<Tensor> deltas_;       // deltas_[i] = d(loss)/d(activations_[i])
  std::vector<bool> delta_written_;  // this pass, per layer
  std::vector<Tensor> extra_deltas_; // per input slot: a second reader's gradient before summing
  Tensor input_, targets_;           // device copies of a minibatch (GPU models only)
  Tensor host_output_;               // predict()'s result, downloaded (GPU models only)
  mutable std::vector<float> host_params_, host_state_;
};

}  // namespace dtrain::core
