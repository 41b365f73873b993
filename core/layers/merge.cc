#include "core/layers/merge.h"

#include <algorithm>

namespace dtrain::core {
namespace {

std::string shapes_string(const std::vector<Shape>& shapes) {
  std::string s;
  for (size_t i = 0; i < shapes.size(); ++i) s += (i ? " and " : "") + shape_string(shapes[i]);
  return s;
}

}  // namespace

AddLayer::AddLayer(const std::vector<Shape>& input_shapes, Activation activation)
    : activation_(activation) {
  for (const Shape& s : input_shapes)
    if (s != input_shapes[0])
      throw UserError("add needs inputs of one shape, got " + shapes_string(input_shapes),
                      "make the branches agree (a shortcut that changes size needs a 1x1 "
                      "convolution with the same stride and filters)");
  input_shapes_ = input_shapes;
  input_shape_ = output_shape_ = input_shapes[0];
}

void AddLayer::forward_merge(const std::vector<const Tensor*>& ins, Tensor& out) {
  out.resize(ins[0]->shape());
  backend_->copy(out.data(), ins[0]->data(), out.size());
  for (size_t k = 1; k < ins.size(); ++k)
    backend_->axpy(1.0f, ins[k]->data(), out.data(), out.size());
  backend_->activation_forward(activation_, out.data(), out.dim(0), out.row_size());
}

void AddLayer::backward_merge(const Tensor& out, const Tensor& dout,
                              const std::vector<Tensor*>& dins) {
  // Each input's gradient is d(loss)/d(sum), written straight into it.
  for (Tensor* din : dins) {
    if (!din) continue;
    din->resize(out.shape());
    backend_->activation_backward_to(activation_, out.data(), dout.data(), din->data(),
                                     out.dim(0), out.row_size());
  }
}

ConcatLayer::ConcatLayer(const std::vector<Shape>& input_shapes) {
  Shape out = input_shapes[0];
  for (size_t k = 1; k < input_shapes.size(); ++k) {
    const Shape& s = input_shapes[k];
    if (s.size() != out.size() || !std::equal(s.begin() + 1, s.end(), out.begin() + 1))
      throw UserError("concat joins along the first axis and needs the others equal, got " +
                          shapes_string(input_shapes),
                      "make the inputs' heights and widths agree (same strides and padding), "
                      "or flatten them first");
    out[0] += s[0];
  }
  input_shapes_ = input_shapes;
  input_shape_ = input_shapes[0];
  output_shape_ = out;
}

void ConcatLayer::forward_merge(const std::vector<const Tensor*>& ins, Tensor& out) {
  const int64_t batch = ins[0]->dim(0);
  out.resize(with_batch(batch, output_shape_));
  int64_t offset = 0;
  for (const Tensor* in : ins) {
    backend_->copy_rows(out.data() + offset, out.row_size(), in->data(), in->row_size(), batch,
                        in->row_size());
    offset += in->row_size();
  }
}

void ConcatLayer::backward_merge(const Tensor& out, const Tensor& dout,
                                 const std::vector<Tensor*>& dins) {
  const int64_t batch = out.dim(0);
  int64_t offset = 0;
  for (size_t k = 0; k < dins.size(); ++k) {
    const int64_t row = shape_size(input_shapes_[k]);
    if (dins[k]) {
      dins[k]->resize(with_batch(batch, input_shapes_[k]));
      backend_->copy_rows(dins[k]->data(), row, dout.data() + offset, out.row_size(), batch, row);
    }
    offset += row;
  }
}

}  // namespace dtrain::core
