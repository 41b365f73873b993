#include "core/layers/activation.h"

#include "core/util/error.h"

namespace dtrain::core {
namespace {
// In the order of kernels::Activation.
const std::vector<std::string> kNames = {"identity", "relu", "leakyrelu", "tanh", "sigmoid",
                                         "softmax"};
}

const std::vector<std::string>& activation_names() { return kNames; }

Activation parse_activation(const std::string& name) {
  for (size_t i = 0; i < kNames.size(); ++i)
    if (kNames[i] == name) return static_cast<Activation>(i);
  std::string list;
  for (auto& n : kNames) list += (list.empty() ? "" : ", ") + n;
  throw UserError("unknown activation '" + name + "'", "use one of: " + list);
}

std::string activation_name(Activation activation) {
  return kNames.at(static_cast<size_t>(activation));
}

}  // namespace dtrain::core
