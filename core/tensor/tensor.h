#pragma once
// A dense float tensor: a shape and a 64-byte aligned buffer it owns. Row-major (NCHW for
// images). Layers reuse their tensors across steps; resize() only reallocates when growing.
// A tensor knows where its buffer lives (docs/architecture/core.md, "The model"): host memory by
// default, or a backend's memory (a GPU's) after set_memory(); data() is then a device pointer,
// which only that backend's operations may touch. Copies between tensors move data across as
// needed.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/util/check.h"
#include "core/util/error.h"
#include "kernels/backend.h"

namespace dtrain::core {

using Shape = std::vector<int64_t>;

// The most elements one tensor (or one layer's weights) may have: far beyond any model that
// fits a machine, and far below where int64 arithmetic on sizes could overflow.
constexpr int64_t kMaxTensorElements = int64_t(1) << 40;

// a * b for sizes; throws UserError naming `what` when it is negative or over
// kMaxTensorElements (a spec with absurd shapes is refused, never wrapped around).
inline int64_t checked_product(int64_t a, int64_t b, const std::string& what) {
  int64_t out = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &out) || out > kMaxTensorElements)
    throw UserError(what + " would have more than 2^40 elements",
                    "use smaller inputs, layers or kernels");
  return out;
}

inline int64_t shape_size(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n = checked_product(n, d, "a tensor");
  return n;
}

std::string shape_string(const Shape& shape);

// Frees a tensor's buffer where it was allocated.
struct TensorRelease {
  kernels::Backend* memory;
  explicit TensorRelease(kernels::Backend* m = nullptr) : memory(m) {}
  void operator()(float* p) const {
    if (memory) memory->release(p);
    else std::free(p);
  }
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(Shape shape) { resize(std::move(shape)); }
  Tensor(const Tensor& other) { *this = other; }
  Tensor& operator=(const Tensor& other);
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;

  // Where the buffer lives: nullptr (the default) is host memory from the C library. Changing
  // it drops the buffer (the tensor is empty afterwards).
  void set_memory(kernels::Backend* memory);
  kernels::Backend* memory() const { return memory_; }
  bool on_host() const { return memory_ == nullptr || memory_->host_memory(); }

  void resize(Shape shape);
  void fill(float value);
  void zero() { fill(0.0f); }
  // size() floats from host memory into this tensor, and out of it.
  void copy_from_host(const float* host);
  void copy_to_host(float* host) const;

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
  Shape shape_;
  int64_t size_ = 0;
  int64_t capacity_ = 0;
  kernels::Backend* memory_ = nullptr;
  std::unique_ptr<float[], TensorRelease> data_;
};

}  // namespace dtrain::core
