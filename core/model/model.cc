#include "core/model/model.h"

#include <algorithm>
#include <cmath>

#include "core/model/layout_plan.h"
#include "core/model/model_builder.h"
#include "core/util/check.h"

namespace dtrain::core {

Model::Model(const ModelSpec& spec, kernels::Backend* backend)
    : spec_(spec),
      backend_(backend ? backend : &kernels::backend()),
      graph_(build_graph(spec)) {
  const auto& layers = graph_.layers;
  output_ = dynamic_cast<OutputLayer*>(layers.back().get());
  DTRAIN_CHECK(output_ != nullptr) << "the last layer must be an output layer";
  DTRAIN_CHECK(graph_.order.back() == static_cast<int>(layers.size()) - 1);
  size_t most_inputs = 1;
  for (size_t i = 0; i < layers.size(); ++i) {
    merges_.push_back(dynamic_cast<MergeLayer*>(layers[i].get()));
    most_inputs = std::max(most_inputs, graph_.inputs[i].size());
  }
  int64_t n_params = 0, n_state = 0;
  for (auto& layer : layers) {
    for (auto seg : layer->param_segments()) {
      seg.offset += n_params;
      segments_.push_back(seg);
    }
    n_params += layer->num_params();
    n_state += layer->num_state();
  }
  kernels::Backend* memory = backend_->host_memory() ? nullptr : backend_;
  for (Tensor* t : {&params_, &grads_, &state_, &input_, &targets_}) t->set_memory(memory);
  // predict()'s download target stays on the host: a fresh tensor would follow its source
  // onto the device.
  host_output_.set_memory(&kernels::cpu_backend());
  params_.resize({n_params});
  grads_.resize({n_params});
  state_.resize({n_state});
  params_.zero();
  grads_.zero();
  state_.zero();
  int64_t p = 0, s = 0;
  for (auto& layer : layers) {
    layer->bind(*backend_, params_.data() + p, grads_.data() + p, state_.data() + s);
    p += layer->num_params();
    s += layer->num_state();
  }
  plan_layouts();
  plan_frontiers();
  activations_.resize(layers.size());
  deltas_.resize(layers.size());
  delta_written_.resize(layers.size());
  extra_deltas_.resize(most_inputs);
  for (auto* v : {&activations_, &deltas_, &extra_deltas_})
    for (Tensor& t : *v) t.set_memory(memory);
}

void Model::plan_layouts() {
  const std::vector<int64_t> blocks =
      plan_output_blocks(graph_, backend_->activation_block());
  for (size_t i = 0; i < graph_.layers.size(); ++i) {
    const int in = graph_.inputs[i][0];  // a merge's inputs share one layout (layout_plan.h)
    graph_.layers[i]->set_layouts(in == kModelInput ? 0 : blocks[size_t(in)], blocks[i]);
  }
}

const float* Model::host_params() const {
  if (params_.on_host()) return params_.data();
  host_params_.resize(static_cast<size_t>(params_.size()));
  params_.copy_to_host(host_params_.data());
  return host_params_.data();
}

const float* Model::host_state() const {
  if (state_.on_host()) return state_.data();
  host_state_.resize(static_cast<size_t>(state_.size()));
  state_.copy_to_host(host_state_.data());
  return host_state_.data();
}

const Tensor& Model::on_device(const Tensor& host, Tensor& staging) const {
  if (params_.on_host()) return host;
  staging = host;  // upload (staging lives in the model's memory)
  return staging;
}

void Model::init(uint64_t seed) {
  // On the host, whatever the backend: the same seed gives the same bits on every device.
  std::vector<float> params(static_cast<size_t>(num_params())), state(static_cast<size_t>(num_state()));
  int64_t p = 0, s = 0;
  for (size_t i = 0; i < graph_.layers.size(); ++i) {
    Rng rng = Rng::derive(seed, i);
    graph_.layers[i]->init_params(params.data() + p, state.data() + s, rng);
    p += graph_.layers[i]->num_params();
    s += graph_.layers[i]->num_state();
  }
  set_params(params.data());
  set_state(state.data());
}

void Model::forward(const Tensor& x, const ForwardMode& mode) {
  DTRAIN_CHECK(x.row_size() == shape_size(spec_.input))
      << "input rows have " << x.row_size() << " values, the model expects "
      << shape_string(spec_.input);
  std::vector<const Tensor*> ins;
  for (int i : graph_.order) {
    const auto& inputs = graph_.inputs[static_cast<size_t>(i)];
    Tensor& out = activations_[static_cast<size_t>(i)];
    if (MergeLayer* merge = merges_[static_cast<size_t>(i)]) {
      ins.clear();
      for (int j : inputs) ins.push_back(&output_of(j, x));
      merge->forward_merge(ins, out);
    } else {
      graph_.layers[static_cast<size_t>(i)]->forward(output_of(inputs[0], x), out, mode);
    }
  }
}

const Tensor& Model::predict(const Tensor& x) {
  forward(on_device(x, input_), ForwardMode{false, nullptr});
  if (params_.on_host()) return activations_.back();
  host_output_ = activations_.back();  // download
  return host_output_;
}

// Layer i's parameters are [offset[i], offset[i + 1]). After each backward position, the
// frontier is the offset of the first layer from which every later one with parameters is done.
void Model::plan_frontiers() {
  const auto& layers = graph_.layers;
  std::vector<int64_t> offset(layers.size() + 1, 0);
  for (size_t i = 0; i < layers.size(); ++i) offset[i + 1] = offset[i] + layers[i]->num_params();
  std::vector<bool> done(layers.size(), false);
  auto frontier = [&] {
    size_t j = layers.size();
    while (j > 0 && (done[j - 1] || layers[j - 1]->num_params() == 0)) --j;
    return offset[j];
  };
  done.back() = true;  // the output layer's backward runs first
  frontiers_ = {frontier()};
  for (size_t k = graph_.order.size() - 1; k-- > 0;) {
    done[static_cast<size_t>(graph_.order[k])] = true;
    frontiers_.push_back(frontier());
  }
}

Tensor* Model::gradient_slot(int j, size_t k) {
  if (j == kModelInput) return nullptr;  // nothing learns from the input's gradient
  if (!delta_written_[static_cast<size_t>(j)]) {
    delta_written_[static_cast<size_t>(j)] = true;
    return &deltas_[static_cast<size_t>(j)];
  }
  return &extra_deltas_[k];
}

void Model::add_into(int j, Tensor* slot) {
  if (!slot || slot == &deltas_[static_cast<size_t>(j)]) return;
  Tensor& sum = deltas_[static_cast<size_t>(j)];
  backend_->axpy(1.0f, slot->data(), sum.data(), sum.size());
}

// d(loss)/d(layer i's output) is complete in deltas_[i]: every reader of i ran before it.
void Model::backward_layer(int i, const Tensor& x) {
  const auto& inputs = graph_.inputs[static_cast<size_t>(i)];
  const Tensor& out = activations_[static_cast<size_t>(i)];
  const Tensor& dout = deltas_[static_cast<size_t>(i)];
  std::vector<Tensor*> slots;
  for (size_t k = 0; k < inputs.size(); ++k) slots.push_back(gradient_slot(inputs[k], k));
  if (MergeLayer* merge = merges_[static_cast<size_t>(i)])
    merge->backward_merge(out, dout, slots);
  else
    graph_.layers[static_cast<size_t>(i)]->backward(output_of(inputs[0], x), out, dout, slots[0]);
  for (size_t k = 0; k < inputs.size(); ++k) add_into(inputs[k], slots[k]);
}

double Model::compute_gradients(const Tensor& x_host, const Tensor& targets_host, Rng& rng,
                                float loss_scale, const GradientsReady* ready) {
  const Tensor& x = on_device(x_host, input_);
  const Tensor& targets = on_device(targets_host, targets_);
  forward(x, ForwardMode{true, &rng});
  std::fill(delta_written_.begin(), delta_written_.end(), false);
  const size_t last = graph_.layers.size() - 1;
  const int in = graph_.inputs[last][0];
  Tensor* din = gradient_slot(in, 0);
  const double loss =
      output_->loss_backward(output_of(in, x), activations_[last], targets, din, loss_scale);
  // Gradients on the host and final as computed can be heard about as they come; none of a
  // loss that is not finite (the worker refuses that step: no part of it may leave).
  const GradientsReady* early =
      ready && params_.on_host() && loss_scale == 1.f && std::isfinite(loss) ? ready : nullptr;
  size_t position = 0;
  if (early) (*early)(frontiers_[position]);
  for (size_t k = graph_.order.size() - 1; k-- > 0;) {
    backward_layer(graph_.order[k], x);
    ++position;
    if (early && frontiers_[position] < frontiers_[position - 1]) (*early)(frontiers_[position]);
  }
  if (loss_scale != 1.f) backend_->scale(grads_.data(), grads_.size(), 1.f / loss_scale);
  return loss;
}

}  // namespace dtrain::core
