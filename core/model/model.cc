#include "core/model/model.h"

#include "core/model/model_builder.h"
#include "core/util/check.h"

namespace dtrain::core {

Model::Model(const ModelSpec& spec, kernels::Backend* backend)
    : spec_(spec),
      backend_(backend ? backend : &kernels::backend()),
      layers_(build_layers(spec)) {
  output_ = dynamic_cast<OutputLayer*>(layers_.back().get());
  DTRAIN_CHECK(output_ != nullptr) << "the last layer must be an output layer";
  int64_t n_params = 0, n_state = 0;
  for (auto& layer : layers_) {
    for (auto seg : layer->param_segments()) {
      seg.offset += n_params;
      segments_.push_back(seg);
    }
    n_params += layer->num_params();
    n_state += layer->num_state();
  }
  kernels::Backend* memory = backend_->host_memory() ? nullptr : backend_;
  for (Tensor* t : {&params_, &grads_, &state_, &delta_a_, &delta_b_, &input_, &targets_})
    t->set_memory(memory);
  params_.resize({n_params});
  grads_.resize({n_params});
  state_.resize({n_state});
  params_.zero();
  grads_.zero();
  state_.zero();
  int64_t p = 0, s = 0;
  for (auto& layer : layers_) {
    layer->bind(*backend_, params_.data() + p, grads_.data() + p, state_.data() + s);
    p += layer->num_params();
    s += layer->num_state();
  }
  activations_.resize(layers_.size());
  for (Tensor& t : activations_) t.set_memory(memory);
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
  for (size_t i = 0; i < layers_.size(); ++i) {
    Rng rng = Rng::derive(seed, i);
    layers_[i]->init_params(params.data() + p, state.data() + s, rng);
    p += layers_[i]->num_params();
    s += layers_[i]->num_state();
  }
  set_params(params.data());
  set_state(state.data());
}

void Model::forward(const Tensor& x, const ForwardMode& mode) {
  DTRAIN_CHECK(x.row_size() == shape_size(spec_.input))
      << "input rows have " << x.row_size() << " values, the model expects "
      << shape_string(spec_.input);
  const Tensor* in = &x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    layers_[i]->forward(*in, activations_[i], mode);
    in = &activations_[i];
  }
}

const Tensor& Model::predict(const Tensor& x) {
  forward(on_device(x, input_), ForwardMode{false, nullptr});
  if (params_.on_host()) return activations_.back();
  host_output_ = activations_.back();  // download
  return host_output_;
}

double Model::compute_gradients(const Tensor& x_host, const Tensor& targets_host, Rng& rng) {
  const Tensor& x = on_device(x_host, input_);
  const Tensor& targets = on_device(targets_host, targets_);
  forward(x, ForwardMode{true, &rng});
  const size_t last = layers_.size() - 1;
  const Tensor& last_in = last == 0 ? x : activations_[last - 1];
  Tensor* din = last == 0 ? nullptr : &delta_a_;
  const double loss = output_->loss_backward(last_in, activations_[last], targets, din);
  for (size_t i = last; i-- > 0;) {
    const Tensor& in = i == 0 ? x : activations_[i - 1];
    Tensor* next = i == 0 ? nullptr : &delta_b_;
    layers_[i]->backward(in, activations_[i], delta_a_, next);
    if (next) std::swap(delta_a_, delta_b_);
  }
  return loss;
}

}  // namespace dtrain::core
