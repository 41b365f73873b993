#include "core/layers/loss.h"

#include "core/util/check.h"
#include "core/util/error.h"

namespace dtrain::core {
namespace {
// In the order of kernels::Loss.
const std::vector<std::string> kNames = {"mcxent", "xent", "mse"};

kernels::LossArgs loss_args(Loss loss, Activation activation, const Tensor& a,
                            const Tensor& targets) {
  DTRAIN_CHECK(a.size() == targets.size()) << "outputs " << shape_string(a.shape())
                                           << " vs targets " << shape_string(targets.shape());
  kernels::LossArgs args;
  args.loss = loss;
  args.activation = activation;
  args.a = a.data();
  args.targets = targets.data();
  args.rows = a.dim(0);
  args.cols = a.row_size();
  return args;
}
}  // namespace

const std::vector<std::string>& loss_names() { return kNames; }

Loss parse_loss(const std::string& name) {
  for (size_t i = 0; i < kNames.size(); ++i)
    if (kNames[i] == name) return static_cast<Loss>(i);
  throw UserError("unknown loss '" + name + "'",
                  "use mcxent (with softmax), xent (with sigmoid) or mse (with identity)");
}

std::string loss_name(Loss loss) { return kNames.at(static_cast<size_t>(loss)); }

double loss_value(kernels::Backend& backend, Loss loss, const Tensor& a, const Tensor& targets) {
  return backend.loss(loss_args(loss, Activation::kIdentity, a, targets));
}

double loss_and_delta(kernels::Backend& backend, Loss loss, Activation activation,
                      const Tensor& a, const Tensor& targets, Tensor& dz) {
  kernels::LossArgs args = loss_args(loss, activation, a, targets);
  dz.resize(a.shape());
  args.dz = dz.data();
  return backend.loss(args);
}

}  // namespace dtrain::core
