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
}

void Model::init(uint64_t seed) {
  int64_t p = 0, s = 0;
  for (size_t i = 0; i < layers_.size(); ++i) {
    Rng rng = Rng::derive(seed, i);
    layers_[i]->init_params(params_.data() + p, state_.data() + s, rng);
    p += layers_[i]->num_params();
    s += layers_[i]->num_state();
  }
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
  forward(x, ForwardMode{false, nullptr});
  return activations_.back();
}

double Model::compute_gradients(const Tensor& x, const Tensor& targets, Rng& rng) {
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
