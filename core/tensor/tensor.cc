#include "core/tensor/tensor.h"

#include <algorithm>

namespace dtrain::core {

std::string shape_string(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this == &other) return *this;
  resize(other.shape_);
  if (size_) std::memcpy(data(), other.data(), sizeof(float) * size_);
  return *this;
}

void Tensor::resize(Shape shape) {
  for (int64_t d : shape) DTRAIN_CHECK(d >= 0) << "negative dimension in " << shape_string(shape);
  int64_t n = shape_size(shape);
  if (n > capacity_) {
    size_t bytes = ((static_cast<size_t>(n) * sizeof(float) + 63) / 64) * 64;
    float* p = static_cast<float*>(std::aligned_alloc(64, bytes));
    DTRAIN_CHECK(p != nullptr) << "out of memory allocating " << bytes << " bytes";
    data_.reset(p);
    capacity_ = n;
  }
  shape_ = std::move(shape);
  size_ = n;
}

void Tensor::fill(float value) { std::fill(data(), data() + size_, value); }

}  // namespace dtrain::core
