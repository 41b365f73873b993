#include "core/tensor/tensor.h"

#include <algorithm>
#include <vector>

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
  if (!memory_ && other.memory_) set_memory(other.memory_);  // a fresh tensor follows its source
  resize(other.shape_);
  if (!size_) return *this;
  if (on_host() && other.on_host()) {
    std::memcpy(data(), other.data(), sizeof(float) * size_);
  } else if (!other.on_host() && memory_ == other.memory_) {
    memory_->copy(data(), other.data(), size_);
  } else if (other.on_host()) {
    memory_->upload(data(), other.data(), size_);
  } else if (on_host()) {
    other.memory_->download(data(), other.data(), size_);
  } else {
    // Two different devices: through the host.
    std::vector<float> staging(static_cast<size_t>(size_));
    other.memory_->download(staging.data(), other.data(), size_);
    memory_->upload(data(), staging.data(), size_);
  }
  return *this;
}

void Tensor::set_memory(kernels::Backend* memory) {
  if (memory == memory_) return;
  data_ = std::unique_ptr<float[], TensorRelease>(nullptr, TensorRelease(memory));
  memory_ = memory;
  shape_.clear();
  size_ = capacity_ = 0;
}

void Tensor::copy_from_host(const float* host) {
  if (!size_) return;
  if (on_host()) std::memcpy(data(), host, sizeof(float) * size_);
  else memory_->upload(data(), host, size_);
}

void Tensor::copy_to_host(float* host) const {
  if (!size_) return;
  if (on_host()) std::memcpy(host, data(), sizeof(float) * size_);
  else memory_->download(host, data(), size_);
}

void Tensor::resize(Shape shape) {
  for (int64_t d : shape) DTRAIN_CHECK(d >= 0) << "negative dimension in " << shape_string(shape);
  int64_t n = shape_size(shape);
  if (n > capacity_) {
    data_.reset();  // before allocating: a device may not hold both
    float* p;
    if (memory_) {
      p = memory_->allocate(n);
    } else {
      const size_t bytes = ((static_cast<size_t>(n) * sizeof(float) + 63) / 64) * 64;
      p = static_cast<float*>(std::aligned_alloc(64, bytes));
      DTRAIN_CHECK(p != nullptr) << "out of memory allocating " << bytes << " bytes";
    }
    data_ = std::unique_ptr<float[], TensorRelease>(p, TensorRelease(memory_));
    capacity_ = n;
  }
  shape_ = std::move(shape);
  size_ = n;
}

void Tensor::fill(float value) {
  if (on_host()) std::fill(data(), data() + size_, value);
  else memory_->fill(data(), size_, value);
}

}  // namespace dtrain::core
