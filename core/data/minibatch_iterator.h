#pragma once
// Shuffled minibatches over shard k of K. Every shard permutes the whole dataset with the same
// seed-derived permutation per epoch and takes its own contiguous slice, so the shards of one
// epoch are disjoint and together cover every example exactly once. From a source that streams
// (packed files) the shard's minibatches are made ahead on a thread (read_ahead.h); the
// minibatches are the same either way.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/data/augment.h"
#include "core/data/dataset.h"
#include "core/data/example_source.h"
#include "core/data/read_ahead.h"

namespace dtrain::core {

class MinibatchIterator {
 public:
  // `augment` changes each training example as it is copied out (augment.h). `source` must
  // outlive the iterator.
  MinibatchIterator(const ExampleSource& source, int64_t batch_size, uint64_t seed,
                    int64_t shard = 0, int64_t num_shards = 1, Augmentation augment = {});
  // Over a Dataset in memory.
  MinibatchIterator(const Dataset& data, int64_t batch_size, uint64_t seed, int64_t shard = 0,
                    int64_t num_shards = 1, Augmentation augment = {});

  // Reshuffles for `epoch` (0-based) and rewinds.
  void start_epoch(int64_t epoch);
  // Moves past the next `batches` minibatches of this epoch, as next() would.
  void skip(int64_t batches);
  // Fills the next minibatch (the last one of an epoch may be smaller); false at epoch end.
  bool next(Tensor& features, Tensor& targets);
  // Minibatch `batch` of another shard in this epoch's order (a lost node's data taken over by
  // a survivor); false if that shard has no such minibatch.
  bool batch_of_shard(int64_t shard, int64_t num_shards, int64_t batch, Tensor& features,
                      Tensor& targets) const;
  int64_t batches_in_shard(int64_t shard, int64_t num_shards) const {
    return shard_batches(source_.size(), batch_, shard, num_shards);
  }
  // Minibatches of `batch` examples in shard `shard` of `num_shards` of `examples`.
  static int64_t shard_batches(int64_t examples, int64_t batch, int64_t shard,
                               int64_t num_shards);

  int64_t examples_per_epoch() const { return end_ - begin_; }
  int64_t batches_per_epoch() const { return (examples_per_epoch() + batch_ - 1) / batch_; }

 private:
  // Either `owned` (then kept) or `source`.
  MinibatchIterator(std::unique_ptr<ExampleSource> owned, const ExampleSource* source,
                    int64_t batch_size, uint64_t seed, int64_t shard, int64_t num_shards,
                    Augmentation augment);
  void fill(int64_t first, int64_t count, Tensor& features, Tensor& targets) const;
  void restart_read_ahead();

  std::unique_ptr<ExampleSource> owned_;  // the Dataset constructor's source
  const ExampleSource& source_;
  int64_t batch_;
  uint64_t seed_;
  int64_t begin_, end_, cursor_;
  std::vector<int64_t> order_;
  Augmentation augment_;
  int64_t epoch_ = 0;
  std::unique_ptr<ReadAhead> ahead_;  // streaming sources: this epoch's rest of the shard
};

}  // namespace dtrain::core
