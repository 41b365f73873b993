#include "core/data/minibatch_iterator.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/layers/layer.h"
#include "core/util/check.h"
#include "core/util/rng.h"

namespace dtrain::core {

MinibatchIterator::MinibatchIterator(const Dataset& data, int64_t batch_size, uint64_t seed,
                                     int64_t shard, int64_t num_shards, Augmentation augment)
    : data_(data), batch_(batch_size), seed_(seed), augment_(augment) {
  DTRAIN_CHECK(batch_size > 0 && num_shards > 0 && shard >= 0 && shard < num_shards)
      << "batch " << batch_size << " shard " << shard << "/" << num_shards;
  const int64_t n = data.size();
  begin_ = n * shard / num_shards;
  end_ = n * (shard + 1) / num_shards;
  cursor_ = end_;
  order_.resize(static_cast<size_t>(n));
}

void MinibatchIterator::start_epoch(int64_t epoch) {
  epoch_ = epoch;
  std::iota(order_.begin(), order_.end(), 0);
  Rng rng = Rng::derive(seed_, 0x5eed0000ULL + static_cast<uint64_t>(epoch));
  std::shuffle(order_.begin(), order_.end(), rng.engine());
  cursor_ = begin_;
}

void MinibatchIterator::fill(int64_t first, int64_t count, Tensor& features,
                             Tensor& targets) const {
  const int64_t fx = data_.features.row_size(), ty = data_.targets.row_size();
  features.resize(with_batch(count, data_.example_shape()));
  targets.resize({count, ty});
  for (int64_t i = 0; i < count; ++i) {
    const int64_t src = order_[first + i];
    std::memcpy(features.row(i), data_.features.row(src), sizeof(float) * fx);
    std::memcpy(targets.row(i), data_.targets.row(src), sizeof(float) * ty);
    if (augment_.active())
      augment_example(augment_, data_.example_shape(), seed_, epoch_, src, features.row(i),
                      scratch_);
  }
}

bool MinibatchIterator::next(Tensor& features, Tensor& targets) {
  if (cursor_ >= end_) return false;
  const int64_t count = std::min(batch_, end_ - cursor_);
  fill(cursor_, count, features, targets);
  cursor_ += count;
  return true;
}

int64_t MinibatchIterator::shard_batches(int64_t n, int64_t batch, int64_t shard,
                                         int64_t num_shards) {
  const int64_t examples = n * (shard + 1) / num_shards - n * shard / num_shards;
  return (examples + batch - 1) / batch;
}

bool MinibatchIterator::batch_of_shard(int64_t shard, int64_t num_shards, int64_t batch,
                                       Tensor& features, Tensor& targets) const {
  if (shard < 0 || shard >= num_shards || batch < 0) return false;
  const int64_t n = data_.size();
  const int64_t first = n * shard / num_shards + batch * batch_;
  const int64_t end = n * (shard + 1) / num_shards;
  if (first >= end) return false;
  fill(first, std::min(batch_, end - first), features, targets);
  return true;
}

}  // namespace dtrain::core
