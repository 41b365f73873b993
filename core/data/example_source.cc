#include "core/data/example_source.h"

#include <cstring>

namespace dtrain::core {

void InMemorySource::read(int64_t index, float* features, float* target) const {
  std::memcpy(features, data_.features.row(index), sizeof(float) * data_.features.row_size());
  std::memcpy(target, data_.targets.row(index), sizeof(float) * data_.targets.row_size());
}

}  // namespace dtrain::core
