#pragma once
// The inputs of inference, each with its key: CSV rows (the key from a key column, or the row
// number), IDX images (the index) or a folder of images (the file's path under it). Raw values:
// the model's normaliser is applied by the caller.
#include <memory>
#include <string>
#include <vector>

#include "core/tensor/tensor.h"
#include "core/util/data_roots.h"

namespace dtrain::core {

struct KeyedInputSpec {
  std::string path;         // a .csv file, an IDX images file or a folder of images
  int64_t key_column = -1;  // CSV: the column holding the key; -1: the row number
  bool header = false;      // CSV: skip the first line
  // A cluster node's data_roots (null: none): each file is checked against them as it is opened.
  std::shared_ptr<const DataRoots> roots;
};

struct KeyedExamples {
  Tensor features;  // [N, example shape...]
  std::vector<std::string> keys;
  int64_t size() const { return int64_t(keys.size()); }
};

// Throws UserError naming the file (and line) and the fix.
KeyedExamples read_keyed_examples(const KeyedInputSpec& input, const Shape& example_shape);

}  // namespace dtrain::core
