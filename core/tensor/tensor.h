#pragma once
// A dense float tensor: a shape and a 64-byte aligned buffer it owns. Row-major (NCHW for
// images). Layers reuse their tensors across steps; resize() only reallocates when growing.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/util/check.h"

namespace dtrain::core {

using Shape = std::vector<int64_t>;

inline int64_t shape_size(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_string(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(Shape shape) { resize(std::move(shape)); }
  Tensor(const Tensor& other) { *this = other; }
  Tensor& operator=(const Tensor& other);
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;

  void resize(Shape shape);
  void fill(float value);
  void zero() { fill(0.0f); }

  const Shape& shape() const { return shape_; }
  int64_t dim(size_t i) const { return shape_.at(i); }
  size_t rank() const { return shape_.size(); }
  int64_t size() const { return size_; }
  // Elements per example: everything but the leading batch dimension.
  int64_t row_size() const { return shape_.empty() ? 0 : size_ / shape_[0]; }

  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  float& operator[](int64_t i) { return data_.get()[i]; }
  float operator[](int64_t i) const { return data_.get()[i]; }
  float* row(int64_t i) { return data() + i * row_size(); }
  const float* row(int64_t i) const { return data() + i * row_size(); }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  Shape shape_;
  int64_t size_ = 0;
  int64_t capacity_ = 0;
  std::unique_ptr<float[], Free> data_;
};

}  // namespace dtrain::core
