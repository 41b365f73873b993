#pragma once
// The values of one received ring part (core/collective/ring_allreduce.h): either owned, or read
// in place from the received message, which the part keeps alive. Reading in place spares a
// copy of every value a node receives (docs/architecture/core.md, "Dense all-reduce").
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace dtrain::core {

class RingPart {
 public:
  RingPart() = default;
  // Owned values (a test's, or ones converted from bf16); implicit: a vector is a part.
  RingPart(std::vector<float> values)
      : owned_(std::move(values)), data_(owned_.data()), size_(int64_t(owned_.size())) {}
  // `n` values at `data`, which stay valid as long as `keep` lives.
  RingPart(std::shared_ptr<const void> keep, const float* data, int64_t n)
      : keep_(std::move(keep)), data_(data), size_(n) {}
  RingPart(RingPart&& other) noexcept { *this = std::move(other); }
  RingPart& operator=(RingPart&& other) noexcept {
    owned_ = std::move(other.owned_);  // a moved vector keeps its buffer: data_ stays valid
    keep_ = std::move(other.keep_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
    return *this;
  }
  RingPart(const RingPart&) = delete;
  RingPart& operator=(const RingPart&) = delete;

  const float* data() const { return data_; }
  int64_t size() const { return size_; }

 private:
  std::vector<float> owned_;
  std::shared_ptr<const void> keep_;
  const float* data_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace dtrain::core
