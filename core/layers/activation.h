#pragma once
// Activation functions by name. The computation is the backend's (kernels/backend.h); the enum
// lives in kernels/op_args.h so every backend shares it.
#include <string>
#include <vector>

#include "kernels/op_args.h"

namespace dtrain::core {

using Activation = kernels::Activation;

// Throws UserError listing the valid names.
Activation parse_activation(const std::string& name);
std::string activation_name(Activation activation);
const std::vector<std::string>& activation_names();

}  // namespace dtrain::core
