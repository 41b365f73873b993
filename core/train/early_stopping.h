#pragma once
// training.early_stopping (seed 002's listeners; docs/architecture/core.md, "Early stopping"):
// after each epoch's evaluation of the test set, training stops once `patience` evaluations in a
// row did not improve the metric by more than min_delta, and the best model is the one kept. In a
// cluster every node evaluates its own replica (they agree at epoch ends to float rounding),
// and the metric is compared rounded to 1e-6, so that every node decides the same.
#include <cstdint>
#include <string>

#include "core/eval/evaluation.h"
#include "core/spec/job_spec.h"

namespace dtrain::core {

class EarlyStopping {
 public:
  explicit EarlyStopping(const EarlyStoppingSpec& spec) : spec_(spec) {}

  // The evaluation after epoch `epoch` (0-based). True when it is the best so far: the caller
  // keeps this model.
  bool observe(int64_t epoch, const Evaluation& eval);
  bool should_stop() const { return waited_ >= spec_.patience; }
  bool has_best() const { return best_epoch_ >= 0; }
  int64_t best_epoch() const { return best_epoch_; }
  double best() const { return best_; }
  // Why training stopped, for the log and the result.
  std::string reason() const;

 private:
  double metric(const Evaluation& eval) const;

  EarlyStoppingSpec spec_;
  int64_t best_epoch_ = -1;
  double best_ = 0.0;
  int64_t waited_ = 0;  // evaluations since the best
  int64_t last_epoch_ = -1;
};

}  // namespace dtrain::core
