#pragma once
// The CSV `dtrain-submit infer` writes, one line per example after a header: key,predicted,
// p0,...,p{K-1}; a model trained on an image folder names its classes (key,predicted,p_cat,...;
// predicted is the name); a regression model writes its values (key,y0,...,y{K-1}). A cluster
// inference job writes the same lines in parts that join into the one-machine file.
#include <cstdio>
#include <string>
#include <vector>

#include "core/infer/keyed_examples.h"
#include "core/io/saved_model.h"

namespace dtrain::core {

class PredictionWriter {
 public:
  explicit PredictionWriter(const SavedModel& saved);

  std::string header() const;
  // Predicts examples [begin, end) of `in` in forward passes of `batch` examples counted from
  // `begin`, and writes their lines. The same batches give the same bits, so parts that start
  // at multiples of `batch` (core/data/part_range.h) write what one pass over all would.
  void write(Model& model, const KeyedExamples& in, int64_t begin, int64_t end, int64_t batch,
             std::FILE* out) const;

 private:
  void row(std::FILE* out, const std::string& key, const float* values) const;

  int64_t outputs_;
  bool regression_;
  const std::vector<std::string>* names_;  // the model's class names, when it has them
};

}  // namespace dtrain::core
