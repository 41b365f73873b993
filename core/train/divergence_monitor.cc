#include "core/train/divergence_monitor.h"

#include <cmath>
#include <cstdio>

namespace dtrain::core {
namespace {

// About the last 20 steps; the best is taken only after the first 50 (the start is noisy).
constexpr double kSmoothing = 0.05;
constexpr int64_t kSettleSteps = 50;

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

DivergenceMonitor::DivergenceMonitor(const JobSpec& job) : job_(job) {
  const LayerSpec& out = job.model.layers.back();
  if (out.loss == Loss::kMcxent || out.loss == Loss::kXent) classes_ = out.units;
}

void DivergenceMonitor::on_step(double loss) {
  if (!std::isfinite(loss)) {
    diverging_ = true;
    return;
  }
  smoothed_ = steps_ == 0 ? loss : smoothed_ + kSmoothing * (loss - smoothed_);
  ++steps_;
  if (steps_ < kSettleSteps) return;
  if (steps_ == kSettleSteps || smoothed_ < best_smoothed_) best_smoothed_ = smoothed_;
  diverging_ = smoothed_ > kStepFactor * best_smoothed_;
}

std::optional<std::string> DivergenceMonitor::check_epoch(int64_t epoch, double train_loss,
                                                          double accuracy) {
  const std::string at = "training diverged in epoch " + std::to_string(epoch + 1) + ": ";
  if (!std::isfinite(train_loss)) return at + "the mean training loss is " + fixed(train_loss, 4);
  if (best_epoch_ >= 0 && train_loss > kLossFactor * best_epoch_loss_)
    return at + "the mean training loss rose to " + fixed(train_loss, 4) + " from its best, " +
           fixed(best_epoch_loss_, 4) + " in epoch " + std::to_string(best_epoch_ + 1);
  if (epoch >= 1)
    if (auto chance = at_chance(accuracy, classes_))
      return at + *chance + " (training loss " + fixed(train_loss, 4) + ")";
  if (best_epoch_ < 0 || train_loss < best_epoch_loss_) {
    best_epoch_loss_ = train_loss;
    best_epoch_ = epoch;
  }
  return std::nullopt;
}

std::optional<std::string> DivergenceMonitor::at_chance(double accuracy, int64_t classes) {
  if (classes <= 1 || accuracy < 0 || accuracy > kChanceFactor / double(classes))
    return std::nullopt;
  return "the test accuracy is " + fixed(accuracy, 4) + ", chance for " +
         std::to_string(classes) + " classes";
}

std::string DivergenceMonitor::fix() const {
  std::string fix = "lower model.updater.learning_rate (now " +
                    fixed(job_.model.updater.learning_rate, 4) + ")";
  if (shares_every_step(job_.training)) {
    if (job_.training.sync.bound != 1) fix += ", use training.sync: bsp";
    if (job_.training.corrections.clip_norm <= 0)
      fix += ", clip gradients (training.corrections.clip_norm: 5)";
    fix += ", or use fewer workers (training.workers_per_node, training.nodes)";
  }
  return fix + "; training.stop_on_divergence: false lets it run on";
}

}  // namespace dtrain::core
