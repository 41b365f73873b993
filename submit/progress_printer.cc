#include "submit/progress_printer.h"

#include <cmath>
#include <string>

namespace dtrain::submit {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) seconds = 0;
  long s = std::lround(seconds);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

void ProgressPrinter::on_data_loaded(int64_t train, int64_t test, int64_t params) {
  std::fprintf(out_, "data: %lld training examples, %lld test examples; model: %lld parameters\n",
               (long long)train, (long long)test, (long long)params);
  std::fflush(out_);
}

void ProgressPrinter::on_gpu_sharing(const std::string& how) {
  std::fprintf(out_, "sharing between the GPU workers: %s\n", how.c_str());
  std::fflush(out_);
}

void ProgressPrinter::on_allreduce_plan(const std::string& how) {
  std::fprintf(out_, "allreduce: a step's gradient goes in %s\n", how.c_str());
  std::fflush(out_);
}

// "  τ 1.2e-03 dens 1.0e-03 sparse 8.1KB |r| 3.2e-01": worker 0's threshold, density, encoding,
// message size and residual L2 norm.
std::string codec_summary(const core::StepProgress& p) {
  if (!p.sharing) return "";
  const double kb = p.codec.message_bytes / 1024.0;
  char buf[128];
  std::snprintf(buf, sizeof buf, "  \u03c4 %.1e dens %.1e %s %.*fKB |r| %.1e", p.codec.tau,
                p.codec.density, core::encoding_name(p.codec.encoding), kb < 10 ? 1 : 0, kb,
                p.codec.residual_norm);
  return buf;
}

void ProgressPrinter::on_step(const core::StepProgress& p) {
  const int64_t done = p.iteration_in_epoch + 1;
  const bool epoch_end = done == p.iterations_per_epoch;
  if (terminal_) {
    auto now = std::chrono::steady_clock::now();
    if (!epoch_end && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(kWidth * done / std::max<int64_t>(1, p.iterations_per_epoch));
    std::string bar(filled, '#');
    bar.resize(kWidth, '.');
    std::fprintf(out_, "\r\033[Kepoch %lld/%lld [%s] %lld/%lld  loss %.4f  %.0f samples/s%s  ETA %s",
                 (long long)p.epoch + 1, (long long)p.epochs, bar.c_str(), (long long)done,
                 (long long)p.iterations_per_epoch, p.loss, p.samples_per_sec,
                 codec_summary(p).c_str(), format_duration(p.eta_seconds).c_str());
    if (p.diverging) std::fputs("  DIVERGING", out_);
    line_open_ = true;
  } else {
    // Plain output: one line per tenth of an epoch keeps logs short but alive.
    const int64_t decile = 10 * done / std::max<int64_t>(1, p.iterations_per_epoch);
    if (decile == last_plain_decile_ || decile == 0) return;
    last_plain_decile_ = decile == 10 ? -1 : decile;
    std::fprintf(out_, "epoch %lld/%lld  iteration %lld/%lld  loss %.4f  %.0f samples/s%s  ETA %s%s\n",
                 (long long)p.epoch + 1, (long long)p.epochs, (long long)done,
                 (long long)p.iterations_per_epoch, p.loss, p.samples_per_sec,
                 codec_summary(p).c_str(), format_duration(p.eta_seconds).c_str(),
                 p.diverging ? "  DIVERGING: loss far above its best" : "");
  }
  std::fflush(out_);
}

void ProgressPrinter::on_epoch(const core::EpochSummary& s) {
  if (line_open_) std::fputc('\n', out_);
  line_open_ = false;
  std::fprintf(out_, "epoch %lld done: train loss %.4f, %.0f samples/s, %.0f%% computing, %s",
               (long long)s.epoch + 1, s.train_loss, s.samples_per_sec, 100 * s.compute_share,
               format_duration(s.seconds).c_str());
  if (s.evaluated)
    std::fprintf(out_, "; test %s", s.eval.summary().c_str());
  std::fputc('\n', out_);
  std::fflush(out_);
}

void ProgressPrinter::on_checkpoint(const std::string& path, int64_t iteration) {
  if (terminal_) return;  // would break the progress bar; the final write is reported anyway
  std::fprintf(out_, "checkpoint at iteration %lld written to %s\n", (long long)iteration,
               path.c_str());
}

}  // namespace dtrain::submit
