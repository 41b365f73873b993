#pragma once
// Loss functions of the output layer, averaged over the minibatch. The arithmetic is the
// backend's (kernels/backend.h, Backend::loss); the canonical pairs (softmax + mcxent, sigmoid
// + xent) use the fused, numerically stable delta a - y.
#include <string>
#include <vector>

#include "core/layers/activation.h"
#include "core/tensor/tensor.h"
#include "kernels/backend.h"

namespace dtrain::core {

using Loss = kernels::Loss;

Loss parse_loss(const std::string& name);  // throws UserError listing the valid names
std::string loss_name(Loss loss);
const std::vector<std::string>& loss_names();

// Mean loss over the batch for outputs `a` (after `activation`) against `targets`, and
// d(mean loss)/d(z) into dz, where z is the pre-activation.
double loss_and_delta(kernels::Backend& backend, Loss loss, Activation activation,
                      const Tensor& a, const Tensor& targets, Tensor& dz);
// Mean loss only (evaluation and gradient checks).
double loss_value(kernels::Backend& backend, Loss loss, const Tensor& a, const Tensor& targets);

}  // namespace dtrain::core
