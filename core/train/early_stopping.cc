#include "core/train/early_stopping.h"

#include <cmath>
#include <cstdio>

namespace dtrain::core {

double EarlyStopping::metric(const Evaluation& eval) const {
  const double value = spec_.metric == "loss" ? eval.mean_loss() : eval.accuracy();
  return std::round(value * 1e6) / 1e6;
}

bool EarlyStopping::observe(int64_t epoch, const Evaluation& eval) {
  last_epoch_ = epoch;
  const double value = metric(eval);
  const bool lower_is_better = spec_.metric == "loss";
  const bool better = best_epoch_ < 0 || (lower_is_better ? value < best_ - spec_.min_delta
                                                          : value > best_ + spec_.min_delta);
  if (!better) {
    ++waited_;
    return false;
  }
  best_ = value;
  best_epoch_ = epoch;
  waited_ = 0;
  return true;
}

std::string EarlyStopping::reason() const {
  char text[256];
  std::snprintf(text, sizeof text,
                "early stopping after epoch %lld: the test %s did not improve by more than %g in "
                "%lld evaluations; the model kept is epoch %lld's (%s %.6f)",
                (long long)last_epoch_ + 1, spec_.metric.c_str(), spec_.min_delta,
                (long long)waited_, (long long)best_epoch_ + 1, spec_.metric.c_str(), best_);
  return text;
}

}  // namespace dtrain::core
