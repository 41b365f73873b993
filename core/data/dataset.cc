#include "core/data/dataset.h"

#include <cstring>

#include "core/util/error.h"

namespace dtrain::core {

void set_class_labels(Dataset& data, std::vector<int32_t> labels, int64_t num_classes,
                      const std::string& source) {
  const int64_t n = static_cast<int64_t>(labels.size());
  data.targets.resize({n, num_classes});
  data.targets.zero();
  for (int64_t i = 0; i < n; ++i) {
    if (labels[i] < 0 || labels[i] >= num_classes)
      throw UserError(source + ": label " + std::to_string(labels[i]) + " in row " +
                          std::to_string(i) + " is outside the output layer's " +
                          std::to_string(num_classes) + " classes",
                      "give the output layer as many units as there are classes");
    data.targets[i * num_classes + labels[i]] = 1.0f;
  }
  data.labels = std::move(labels);
  data.num_classes = num_classes;
}

void reshape_features(Dataset& data, const Shape& example_shape, const std::string& source) {
  const int64_t n = data.size();
  if (data.features.row_size() != shape_size(example_shape))
    throw UserError(source + ": examples have " + std::to_string(data.features.row_size()) +
                        " values but model.input " + shape_string(example_shape) + " needs " +
                        std::to_string(shape_size(example_shape)),
                    "set model.input to match the data, e.g. [784] or [1, 28, 28] for 28x28 "
                    "images");
  if (data.example_shape() == example_shape) return;  // shaped already (image folders)
  Tensor reshaped([&] { Shape s{n}; s.insert(s.end(), example_shape.begin(), example_shape.end()); return s; }());
  std::memcpy(reshaped.data(), data.features.data(), sizeof(float) * data.features.size());
  data.features = std::move(reshaped);
}

}  // namespace dtrain::core
