#pragma once
// An in-memory labelled dataset: features [N, example shape...] and targets [N, K] (one-hot
// for classification, values for regression). labels[i] is the class, or -1 for regression.
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor/tensor.h"

namespace dtrain::core {

struct Dataset {
  Tensor features;
  Tensor targets;
  std::vector<int32_t> labels;
  int64_t num_classes = 0;  // 0 for regression
  std::vector<std::string> class_names;  // when the source names its classes (image folders)

  int64_t size() const { return features.rank() ? features.dim(0) : 0; }
  Shape example_shape() const {
    return Shape(features.shape().begin() + 1, features.shape().end());
  }
};

// Builds one-hot targets; throws UserError naming the row if a label is >= num_classes.
void set_class_labels(Dataset& data, std::vector<int32_t> labels, int64_t num_classes,
                      const std::string& source);

// Reshapes the features to the model's input shape, or explains the mismatch.
void reshape_features(Dataset& data, const Shape& example_shape, const std::string& source);

}  // namespace dtrain::core
