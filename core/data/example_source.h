#pragma once
// Where a worker's training examples come from (docs/architecture/core.md, "Spec, data and files"):
// a Dataset in memory, or packed batch files (packed_file.h) read as minibatches are made, so data
// larger than memory trains. Minibatches are made the same way from either (minibatch_iterator.h),
// so a job gives the same minibatches whichever it trains from.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/data/dataset.h"

namespace dtrain::core {

class ExampleSource {
 public:
  virtual ~ExampleSource() = default;
  virtual int64_t size() const = 0;
  virtual Shape example_shape() const = 0;
  virtual int64_t num_classes() const = 0;
  virtual const std::vector<std::string>& class_names() const = 0;
  // Example `index`'s features (normalised) and one-hot target into the two rows. Safe to call
  // from several threads at once. Throws UserError for damaged data.
  virtual void read(int64_t index, float* features, float* target) const = 0;
  // True when reading costs I/O: minibatches are then made ahead on a thread of their own.
  virtual bool streams() const { return false; }
};

// The examples of a Dataset (already normalised), by reference: `data` must outlive it.
class InMemorySource : public ExampleSource {
 public:
  explicit InMemorySource(const Dataset& data) : data_(data) {}
  int64_t size() const override { return data_.size(); }
  Shape example_shape() const override { return data_.example_shape(); }
  int64_t num_classes() const override { return data_.targets.row_size(); }
  const std::vector<std::string>& class_names() const override { return data_.class_names; }
  void read(int64_t index, float* features, float* target) const override;

 private:
  const Dataset& data_;
};

}  // namespace dtrain::core
