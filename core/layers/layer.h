#pragma once
// A layer of a sequential model. Parameters, their gradients and non-trained state (batch norm
// running statistics) live in the model's flat buffers; a layer gets views into them with bind().
// Keeping the parameters flat is what lets gradient sharing treat the model as one vector.
// A layer decides what to compute; its model's backend (kernels/backend.h) computes it.
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor/tensor.h"
#include "core/util/rng.h"
#include "kernels/backend.h"

namespace dtrain::core {

// A run of a layer's parameters; `regularized` says whether L2 applies (weights yes, biases no).
struct ParamSegment {
  int64_t offset = 0;
  int64_t size = 0;
  bool regularized = false;
};

struct ForwardMode {
  bool training = false;
  Rng* rng = nullptr;  // dropout masks; required when training a model with dropout
};

class Layer {
 public:
  virtual ~Layer() = default;
  virtual std::string kind() const = 0;

  // Per-example shapes (no batch dimension).
  const Shape& input_shape() const { return input_shape_; }
  const Shape& output_shape() const { return output_shape_; }

  virtual int64_t num_params() const { return 0; }
  virtual int64_t num_state() const { return 0; }
  virtual std::vector<ParamSegment> param_segments() const { return {}; }
  virtual void init_params(float* params, float* state, Rng& rng) const {}

  void bind(kernels::Backend& backend, float* params, float* grads, float* state) {
    backend_ = &backend;
    params_ = params;
    grads_ = grads;
    state_ = state;
    for (Tensor* t : scratch_tensors()) t->set_memory(device_memory());
  }

  // Activation layouts (kernels/op_args.h; docs/architecture/kernels.md, "Layouts"). What a
  // layer can do with channel-blocked [batch, channels, h, w] activations: nothing (plain
  // only); read and write them as told, each side separately (convolution, subsampling, global
  // pooling); or keep its input's layout, whatever it is (batch norm and add, element- or
  // channel-wise). The model plans the layouts once (core/model/layout_plan.h) and tells each
  // layer before its first pass; its input's gradient is in its input's layout, its output's in
  // its output's.
  enum class Blocking { kNone, kFree, kPreserves };
  virtual Blocking blocking() const { return Blocking::kNone; }
  void set_layouts(int64_t in_block, int64_t out_block) {
    in_block_ = in_block;
    out_block_ = out_block;
  }

  // in: [batch, input_shape...]; resizes out to [batch, output_shape...].
  virtual void forward(const Tensor& in, Tensor& out, const ForwardMode& mode) = 0;
  // From d(loss)/d(out): overwrites this layer's parameter gradients and, when din is given,
  // writes d(loss)/d(in). `in` and `out` are the tensors of the last forward pass.
  virtual void backward(const Tensor& in, const Tensor& out, const Tensor& dout, Tensor* din) = 0;

 protected:
  // The tensors a layer keeps between forward and backward: they live with its parameters.
  virtual std::vector<Tensor*> scratch_tensors() { return {}; }
  // d(loss)/d(z) for out = activation(z), from d(loss)/d(out): `dout` itself for identity, else
  // computed into `scratch` (one of the layer's scratch_tensors()).
  const Tensor& before_activation(kernels::Activation activation, const Tensor& out,
                                  const Tensor& dout, Tensor& scratch) {
    if (activation == kernels::Activation::kIdentity) return dout;
    scratch.resize(dout.shape());
    backend_->activation_backward_to(activation, out.data(), dout.data(), scratch.data(),
                                     out.dim(0), out.row_size());
    return scratch;
  }
  // nullptr (host memory) on the CPU, else the backend.
  kernels::Backend* device_memory() const {
    return backend_ && !backend_->host_memory() ? backend_ : nullptr;
  }

  Shape input_shape_;
  Shape output_shape_;
  int64_t in_block_ = 0, out_block_ = 0;  // set_layouts
  kernels::Backend* backend_ = nullptr;
  float* params_ = nullptr;
  float* grads_ = nullptr;
  float* state_ = nullptr;
};

inline Shape with_batch(int64_t batch, const Shape& example_shape) {
  Shape s{batch};
  s.insert(s.end(), example_shape.begin(), example_shape.end());
  return s;
}

}  // namespace dtrain::core
