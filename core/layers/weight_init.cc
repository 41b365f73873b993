#include "core/layers/weight_init.h"

#include <cmath>

#include "core/util/error.h"

namespace dtrain::core {
namespace {
const std::vector<std::string> kNames = {"xavier", "relu", "uniform"};
}

const std::vector<std::string>& weight_init_names() { return kNames; }

WeightInit parse_weight_init(const std::string& name) {
  for (size_t i = 0; i < kNames.size(); ++i)
    if (kNames[i] == name) return static_cast<WeightInit>(i);
  throw UserError("unknown weight_init '" + name + "'", "use one of: xavier, relu, uniform");
}

std::string weight_init_name(WeightInit init) { return kNames.at(static_cast<size_t>(init)); }

void init_weights(WeightInit init, float* w, int64_t n, int64_t fan_in, int64_t fan_out,
                  Rng& rng) {
  switch (init) {
    case WeightInit::kXavier: {
      const float sd = std::sqrt(2.0f / static_cast<float>(fan_in + fan_out));
      for (int64_t i = 0; i < n; ++i) w[i] = rng.normal(0.0f, sd);
      return;
    }
    case WeightInit::kRelu: {
      const float sd = std::sqrt(2.0f / static_cast<float>(fan_in));
      for (int64_t i = 0; i < n; ++i) w[i] = rng.normal(0.0f, sd);
      return;
    }
    case WeightInit::kUniform: {
      const float a = 1.0f / std::sqrt(static_cast<float>(fan_in));
      for (int64_t i = 0; i < n; ++i) w[i] = rng.uniform(-a, a);
      return;
    }
  }
}

}  // namespace dtrain::core
