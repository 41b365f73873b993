#include "core/layers/dense.h"

#include <cstring>

#include "kernels/backend.h"

namespace dtrain::core {

DenseLayer::DenseLayer(const Shape& input_shape, int64_t units, Activation activation,
                       WeightInit init)
    : in_(shape_size(input_shape)), out_(units), activation_(activation), init_(init) {
  input_shape_ = input_shape;
  output_shape_ = {units};
  checked_product(in_ + 1, out_, "a dense layer's weights");  // refuses sizes that overflow
}

std::vector<ParamSegment> DenseLayer::param_segments() const {
  return {{0, in_ * out_, true}, {in_ * out_, out_, false}};
}

void DenseLayer::init_params(float* params, float*, Rng& rng) const {
  init_weights(init_, params, in_ * out_, in_, out_, rng);
  std::memset(params + in_ * out_, 0, sizeof(float) * out_);
}

void DenseLayer::forward(const Tensor& in, Tensor& out, const ForwardMode&) {
  const int64_t batch = in.dim(0);
  out.resize({batch, out_});
  backend_->gemm(false, false, batch, out_, in_, 1.0f, in.data(), in_, params_, out_, 0.0f,
                 out.data(), out_);
  backend_->add_row_vector(out.data(), params_ + in_ * out_, batch, out_);
  backend_->activation_forward(activation_, out.data(), batch, out_);
}

void DenseLayer::backward(const Tensor& in, const Tensor& out, const Tensor& dout, Tensor* din) {
  backward_from_preactivation(in, before_activation(activation_, out, dout, dz_), din);
}

void DenseLayer::backward_from_preactivation(const Tensor& in, const Tensor& dz, Tensor* din) {
  const int64_t batch = in.dim(0);
  // dW = in^T · dz ; db = column sums of dz ; din = dz · W^T
  backend_->gemm(true, false, in_, out_, batch, 1.0f, in.data(), in_, dz.data(), out_, 0.0f,
                 grads_, out_);
  backend_->column_sums(dz.data(), batch, out_, grads_ + in_ * out_);
  if (din) {
    din->resize(in.shape());
    backend_->gemm(false, true, batch, in_, out_, 1.0f, dz.data(), out_, params_, out_, 0.0f,
                   din->data(), in_);
  }
}

}  // namespace dtrain::core
