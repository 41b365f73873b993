#pragma once
// Training progress for people: a redrawn progress bar on a terminal, plain lines otherwise
// (log files, CI), and an epoch summary either way.
#include <chrono>
#include <cstdio>

#include "core/train/training_types.h"

namespace dtrain::submit {

class ProgressPrinter : public core::TrainingListener {
 public:
  // out: where progress goes; terminal: redraw one line instead of printing many.
  ProgressPrinter(std::FILE* out, bool terminal) : out_(out), terminal_(terminal) {}

  void on_data_loaded(int64_t train, int64_t test, int64_t params) override;
  void on_gpu_sharing(const std::string& how) override;
  void on_allreduce_plan(const std::string& how) override;
  void on_step(const core::StepProgress& p) override;
  void on_epoch(const core::EpochSummary& s) override;
  void on_checkpoint(const std::string& path, int64_t iteration) override;

 private:
  std::FILE* out_;
  bool terminal_;
  std::chrono::steady_clock::time_point last_draw_{};
  int64_t last_plain_decile_ = -1;
  bool line_open_ = false;
};

std::string format_duration(double seconds);

}  // namespace dtrain::submit
