#include "core/data/minibatch_iterator.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/layers/layer.h"
#include "core/util/check.h"
#include "core/util/rng.h"

namespace dtrain::core {

namespace {
constexpr size_t kReadAheadBatches = 4;
}  // namespace

MinibatchIterator::MinibatchIterator(const Dataset& data, int64_t batch_size, uint64_t seed,
                                     int64_t shard, int64_t num_shards, Augmentation augment)
    : MinibatchIterator(std::make_unique<InMemorySource>(data), nullptr, batch_size, seed, shard,
                        num_shards, augment) {}

MinibatchIterator::MinibatchIterator(const ExampleSource& source, int64_t batch_size,
                                     uint64_t seed, int64_t shard, int64_t num_shards,
                                     Augmentation augment)
    : MinibatchIterator(nullptr, &source, batch_size, seed, shard, num_shards, augment) {}

MinibatchIterator::MinibatchIterator(std::unique_ptr<ExampleSource> owned,
                                     const ExampleSource* source, int64_t batch_size,
                                     uint64_t seed, int64_t shard, int64_t num_shards,
                                     Augmentation augment)
    : owned_(std::move(owned)),
      source_(owned_ ? *owned_ : *source),
      batch_(batch_size),
      seed_(seed),
      augment_(augment) {
  DTRAIN_CHECK(batch_size > 0 && num_shards > 0 && shard >= 0 && shard < num_shards)
      << "batch " << batch_size << " shard " << shard << "/" << num_shards;
  const int64_t n = source_.size();
  begin_ = n * shard / num_shards;
  end_ = n * (shard + 1) / num_shards;
  cursor_ = end_;
  order_.resize(static_cast<size_t>(n));
}

void MinibatchIterator::start_epoch(int64_t epoch) {
  ahead_.reset();  // its thread reads order_
  epoch_ = epoch;
  std::iota(order_.begin(), order_.end(), 0);
  Rng rng = Rng::derive(seed_, 0x5eed0000ULL + static_cast<uint64_t>(epoch));
  std::shuffle(order_.begin(), order_.end(), rng.engine());
  cursor_ = begin_;
  restart_read_ahead();
}

void MinibatchIterator::skip(int64_t batches) {
  cursor_ = std::min(end_, cursor_ + std::max<int64_t>(0, batches) * batch_);
  restart_read_ahead();
}

void MinibatchIterator::restart_read_ahead() {
  ahead_.reset();
  if (!source_.streams() || cursor_ >= end_) return;
  ahead_ = std::make_unique<ReadAhead>(
      [this](int64_t first, int64_t count, Tensor& f, Tensor& t) { fill(first, count, f, t); },
      cursor_, end_, batch_, kReadAheadBatches);
}

void MinibatchIterator::fill(int64_t first, int64_t count, Tensor& features,
                             Tensor& targets) const {
  const Shape shape = source_.example_shape();
  features.resize(with_batch(count, shape));
  targets.resize({count, source_.num_classes()});
  std::vector<float> scratch;  // per call: the read-ahead thread and takeovers fill at once
  for (int64_t i = 0; i < count; ++i) {
    const int64_t src = order_[first + i];
    source_.read(src, features.row(i), targets.row(i));
    if (augment_.active())
      augment_example(augment_, shape, seed_, epoch_, src, features.row(i), scratch);
  }
}

bool MinibatchIterator::next(Tensor& features, Tensor& targets) {
  if (cursor_ >= end_) return false;
  const int64_t count = std::min(batch_, end_ - cursor_);
  if (ahead_) {
    if (!ahead_->next(features, targets)) return false;
  } else {
    fill(cursor_, count, features, targets);
  }
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
  const int64_t n = source_.size();
  const int64_t first = n * shard / num_shards + batch * batch_;
  const int64_t end = n * (shard + 1) / num_shards;
  if (first >= end) return false;
  fill(first, std::min(batch_, end - first), features, targets);
  return true;
}

}  // namespace dtrain::core
