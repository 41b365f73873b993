#include "core/layers/loss.h"

#include <algorithm>
#include <cmath>

#include "core/util/check.h"
#include "core/util/error.h"

namespace dtrain::core {
namespace {
const std::vector<std::string> kNames = {"mcxent", "xent", "mse"};
constexpr float kProbFloor = 1e-7f;  // keeps log() finite for saturated outputs

float clamp_prob(float p) { return std::min(std::max(p, kProbFloor), 1.0f - kProbFloor); }
}  // namespace

const std::vector<std::string>& loss_names() { return kNames; }

Loss parse_loss(const std::string& name) {
  for (size_t i = 0; i < kNames.size(); ++i)
    if (kNames[i] == name) return static_cast<Loss>(i);
  throw UserError("unknown loss '" + name + "'",
                  "use mcxent (with softmax), xent (with sigmoid) or mse (with identity)");
}

std::string loss_name(Loss loss) { return kNames.at(static_cast<size_t>(loss)); }

double loss_value(Loss loss, const Tensor& a, const Tensor& targets) {
  DTRAIN_CHECK(a.size() == targets.size()) << "outputs " << shape_string(a.shape())
                                           << " vs targets " << shape_string(targets.shape());
  const int64_t batch = a.dim(0), n = a.size(), cols = a.row_size();
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double y = targets[i], p = a[i];
    switch (loss) {
      case Loss::kMcxent:
        if (y != 0.0) total -= y * std::log(clamp_prob(a[i]));
        break;
      case Loss::kXent:
        total -= y * std::log(clamp_prob(a[i])) + (1.0 - y) * std::log(1.0 - clamp_prob(a[i]));
        break;
      case Loss::kMse:
        total += (p - y) * (p - y) / static_cast<double>(cols);
        break;
    }
  }
  return total / static_cast<double>(batch);
}

double loss_and_delta(Loss loss, Activation activation, const Tensor& a, const Tensor& targets,
                      Tensor& dz) {
  const double value = loss_value(loss, a, targets);
  const int64_t batch = a.dim(0), n = a.size(), cols = a.row_size();
  const float inv_batch = 1.0f / static_cast<float>(batch);
  dz.resize(a.shape());
  const bool fused = (loss == Loss::kMcxent && activation == Activation::kSoftmax) ||
                     (loss == Loss::kXent && activation == Activation::kSigmoid);
  if (fused) {
    for (int64_t i = 0; i < n; ++i) dz[i] = (a[i] - targets[i]) * inv_batch;
    return value;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float y = targets[i];
    switch (loss) {
      case Loss::kMcxent:
        dz[i] = -y / clamp_prob(a[i]) * inv_batch;
        break;
      case Loss::kXent: {
        const float p = clamp_prob(a[i]);
        dz[i] = (p - y) / (p * (1.0f - p)) * inv_batch;
        break;
      }
      case Loss::kMse:
        dz[i] = 2.0f * (a[i] - y) / static_cast<float>(cols) * inv_batch;
        break;
    }
  }
  activation_backward(activation, a.data(), dz.data(), batch, cols);
  return value;
}

}  // namespace dtrain::core
