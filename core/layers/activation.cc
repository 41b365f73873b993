#include "core/layers/activation.h"

#include <algorithm>
#include <cmath>

#include "core/util/error.h"

namespace dtrain::core {
namespace {
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

void activation_forward(Activation activation, float* x, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  switch (activation) {
    case Activation::kIdentity:
      return;
    case Activation::kRelu:
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
      return;
    case Activation::kLeakyRelu:
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : kLeakyReluSlope * x[i];
      return;
    case Activation::kTanh:
      for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i]);
      return;
    case Activation::kSigmoid:
      for (int64_t i = 0; i < n; ++i) x[i] = 1.0f / (1.0f + std::exp(-x[i]));
      return;
    case Activation::kSoftmax:
      for (int64_t r = 0; r < rows; ++r) {
        float* row = x + r * cols;
        float max = *std::max_element(row, row + cols);
        float sum = 0.0f;
        for (int64_t c = 0; c < cols; ++c) sum += (row[c] = std::exp(row[c] - max));
        float inv = 1.0f / sum;
        for (int64_t c = 0; c < cols; ++c) row[c] *= inv;
      }
      return;
  }
}

void activation_backward(Activation activation, const float* a, float* d, int64_t rows,
                         int64_t cols) {
  const int64_t n = rows * cols;
  switch (activation) {
    case Activation::kIdentity:
      return;
    case Activation::kRelu:
      for (int64_t i = 0; i < n; ++i) d[i] = a[i] > 0.0f ? d[i] : 0.0f;
      return;
    case Activation::kLeakyRelu:
      for (int64_t i = 0; i < n; ++i) d[i] = a[i] > 0.0f ? d[i] : kLeakyReluSlope * d[i];
      return;
    case Activation::kTanh:
      for (int64_t i = 0; i < n; ++i) d[i] *= 1.0f - a[i] * a[i];
      return;
    case Activation::kSigmoid:
      for (int64_t i = 0; i < n; ++i) d[i] *= a[i] * (1.0f - a[i]);
      return;
    case Activation::kSoftmax:
      // dz_c = a_c * (d_c - sum_k d_k a_k): the Jacobian-vector product of softmax.
      for (int64_t r = 0; r < rows; ++r) {
        const float* ar = a + r * cols;
        float* dr = d + r * cols;
        float dot = 0.0f;
        for (int64_t c = 0; c < cols; ++c) dot += dr[c] * ar[c];
        for (int64_t c = 0; c < cols; ++c) dr[c] = ar[c] * (dr[c] - dot);
      }
      return;
  }
}

}  // namespace dtrain::core
