#include "daemon/node/stats_recorder.h"

#include <algorithm>

namespace dtrain::daemon {

int64_t StatsRecorder::stride_for(int64_t total_worker_steps) {
  return std::max<int64_t>(1, (total_worker_steps + kTargetRows - 1) / kTargetRows);
}

void StatsRecorder::set_stride(int64_t stride) {
  std::lock_guard<std::mutex> lock(mutex_);
  stride_ = std::max<int64_t>(1, stride);
}

void StatsRecorder::on_worker_step(int worker, const core::WorkerStep& s) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (s.iteration % stride_ == 0) {
    const double ms = s.times.total_ms();
    const double encoding =
        s.sharing ? (s.codec.encoding == core::Encoding::kBitmap ? 1.0 : 0.0) : -1.0;
    pending_.steps.push_back({double(worker), double(s.iteration + 1), double(s.epoch + 1),
                              s.loss, ms > 0 ? s.samples * 1000.0 / ms : 0.0, s.codec.tau,
                              s.codec.density, encoding, double(s.codec.message_bytes),
                              s.codec.residual_norm, s.times.compute_ms, s.times.encode_ms,
                              s.times.apply_ms, s.times.wait_ms, s.start_unix_ms,
                              s.times.data_ms});
  }
  const auto now = std::chrono::steady_clock::now();
  if ((worker == 0 && now - last_sent_ >= std::chrono::seconds(1)) ||
      pending_.steps.size() >= kMaxStatsRows)
    flush_locked();
}

void StatsRecorder::on_epoch(const core::EpochSummary& e) {
  std::lock_guard<std::mutex> lock(mutex_);
  pending_.epochs.push_back({double(e.epoch + 1), e.train_loss, e.samples_per_sec,
                             e.evaluated ? e.eval.accuracy() : -1.0, e.seconds});
}

void StatsRecorder::flush() {
  std::lock_guard<std::mutex> lock(mutex_);
  flush_locked();
}

// Links are sampled only with a report that goes out: sampled into one that does not, they
// would wait, stale, for the next.
void StatsRecorder::flush_locked() {
  last_sent_ = std::chrono::steady_clock::now();
  if (pending_.steps.empty() && pending_.epochs.empty()) return;
  if (sample_links_) {
    const double now_ms = std::chrono::duration<double, std::milli>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
    for (const LinkSample& l : sample_links_())
      pending_.links.push_back({now_ms, double(l.peer), double(l.bytes_out), double(l.bytes_in),
                                double(l.datagrams_out), double(l.retransmits), l.rtt_us});
  }
  StatsReport report = std::move(pending_);
  pending_ = {};
  send_(report);
}

}  // namespace dtrain::daemon
