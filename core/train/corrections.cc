#include "core/train/corrections.h"

#include <algorithm>
#include <cmath>

#include "core/codec/message_elements.h"

namespace dtrain::core {

CorrectionsSpec worker_corrections(const TrainingSpec& training) {
  if (shares_every_step(training)) return training.corrections;
  CorrectionsSpec own = corrections_off();
  own.clip_norm = training.corrections.clip_norm;
  own.lr_warmup_epochs = training.corrections.lr_warmup_epochs;
  return own;
}

CorrectionsSpec corrections_off() {
  CorrectionsSpec off;
  off.momentum_masking = false;
  off.clip_norm = 0.0;
  off.sparsity_warmup_epochs = 0.0;
  off.lr_scaling = "linear";  // with no warm-up: factor 1, the spec's learning rate
  off.lr_warmup_epochs = 0.0;
  return off;
}

double lr_scale(const CorrectionsSpec& c, int workers, double progress) {
  const double w = std::max(1, workers);
  double target = 1.0;
  if (c.lr_scaling == "sqrt") target = 1.0 / std::sqrt(w);
  else if (c.lr_scaling == "none") target = 1.0 / w;
  if (c.lr_warmup_epochs <= 0.0 || progress >= c.lr_warmup_epochs) return target;
  const double start = 1.0 / w;
  return start + (target - start) * std::max(0.0, progress) / c.lr_warmup_epochs;
}

double density_scale(const CorrectionsSpec& c, double max_density, double progress) {
  if (c.sparsity_warmup_epochs <= 0.0 || progress >= c.sparsity_warmup_epochs ||
      max_density <= 0.0 || c.sparsity_warmup_start <= max_density)
    return 1.0;
  const double left = 1.0 - std::max(0.0, progress) / c.sparsity_warmup_epochs;
  return std::pow(c.sparsity_warmup_start / max_density, left);
}

double clip_gradient(const CorrectionsSpec& c, int workers, kernels::Backend& backend, float* g,
                     int64_t n) {
  if (c.clip_norm <= 0.0) return 1.0;
  const double squares = backend.sum_squares(g, n);
  const double bound = c.clip_norm / std::sqrt(double(std::max(1, workers)));
  const double norm = std::sqrt(squares);
  if (norm <= bound) return 1.0;
  const double scale = bound / norm;
  backend.scale(g, n, static_cast<float>(scale));
  return scale;
}

void mask_momentum(const EncodedMessage& m, float* momentum) {
  for_each_sent(m, [momentum](int64_t i, float) { momentum[i] = 0.0f; });
}

}  // namespace dtrain::core
