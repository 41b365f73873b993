#pragma once
// Weight initialisation schemes (biases start at zero).
#include <cstdint>
#include <string>
#include <vector>

#include "core/util/rng.h"

namespace dtrain::core {

enum class WeightInit { kXavier, kRelu, kUniform };

WeightInit parse_weight_init(const std::string& name);  // throws UserError listing the names
std::string weight_init_name(WeightInit init);
const std::vector<std::string>& weight_init_names();

// xavier: N(0, 2/(fan_in+fan_out)); relu (He): N(0, 2/fan_in); uniform: U(±1/sqrt(fan_in)).
void init_weights(WeightInit init, float* w, int64_t n, int64_t fan_in, int64_t fan_out, Rng& rng);

}  // namespace dtrain::core
