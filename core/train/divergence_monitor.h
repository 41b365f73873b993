#pragma once
// Divergence is never a success (docs/architecture/core.md, "Checks"): watches one replica's
// training loss step by step (a smoothed loss far above its best shows as "diverging" while it
// happens) and checks each epoch: a mean training loss well above the best epoch's, a non-finite
// one, or a test accuracy at chance from the second epoch on stops the job with the figures and the
// fix.
#include <cstdint>
#include <optional>
#include <string>

#include "core/spec/job_spec.h"

namespace dtrain::core {

class DivergenceMonitor {
 public:
  // An epoch's mean training loss above kLossFactor times the best epoch's has diverged.
  static constexpr double kLossFactor = 2.0;
  // The smoothed step loss above kStepFactor times its best is shown as diverging.
  static constexpr double kStepFactor = 3.0;
  // Accuracy at most kChanceFactor / classes is chance.
  static constexpr double kChanceFactor = 1.5;

  explicit DivergenceMonitor(const JobSpec& job);

  // After each step of the watched replica.
  void on_step(double loss);
  bool diverging() const { return diverging_; }
  double smoothed_loss() const { return smoothed_; }

  // After epoch `epoch` (0-based): the error (what happened, with the figures) if the job has
  // diverged, else nothing. accuracy < 0: not evaluated this epoch.
  std::optional<std::string> check_epoch(int64_t epoch, double train_loss, double accuracy);
  // What to do about it, for the error's fix.
  std::string fix() const;

  // "the test accuracy is A, chance for C classes" when `accuracy` is at chance for a
  // classifier of `classes` outputs (classes <= 1: not a classifier), else nothing. The
  // controller applies it to a job's merged final accuracy too.
  static std::optional<std::string> at_chance(double accuracy, int64_t classes);

 private:
  const JobSpec& job_;
  int64_t classes_ = 0;  // 0: not a classifier (no chance level)
  int64_t steps_ = 0;
  double smoothed_ = 0.0, best_smoothed_ = 0.0;
  bool diverging_ = false;
  double best_epoch_loss_ = -1.0;
  int64_t best_epoch_ = -1;
};

}  // namespace dtrain::core
