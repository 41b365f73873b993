#pragma once
// A node's part of the job's stats history (docs/architecture/daemon.md, "Stats history"): every
// `stride`-th step of each of its workers (loss, samples/s, τ, density, encoding, message bytes,
// residual norm, and where the step's time went) and every epoch's figures, sent to the
// controller as Stats reports about once a second and at the end. The stride keeps a whole job
// near kTargetRows rows, whatever its length.
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "core/train/training_types.h"
#include "core/train/step_stats.h"
#include "daemon/protocol/job_stats.h"

namespace dtrain::daemon {

class StatsRecorder {
 public:
  static constexpr int64_t kTargetRows = 100000;
  using Send = std::function<void(const StatsReport& report)>;

  explicit StatsRecorder(Send send) : send_(std::move(send)) {}
  // The data channel's links to the job's peers, sampled at each send (the transport tracks).
  struct LinkSample {
    uint32_t peer = 0;
    uint64_t bytes_out = 0, bytes_in = 0, datagrams_out = 0, retransmits = 0;
    double rtt_us = 0;
  };
  void sample_links_with(std::function<std::vector<LinkSample>()> sample) {
    std::lock_guard<std::mutex> lock(mutex_);
    sample_links_ = std::move(sample);
  }
  // Every stride-th step of a job of `total_worker_steps` (all workers of all nodes) keeps
  // the job near kTargetRows rows.
  static int64_t stride_for(int64_t total_worker_steps);
  void set_stride(int64_t stride);

  // From each worker's thread (thread-safe); worker 0's also sends what waits, once a second.
  void on_worker_step(int worker, const core::WorkerStep& step);
  void on_epoch(const core::EpochSummary& summary);
  // Sends what waits (the end of the job, or its failure).
  void flush();

 private:
  void flush_locked();

  Send send_;
  std::function<std::vector<LinkSample>()> sample_links_;
  std::mutex mutex_;
  int64_t stride_ = 1;
  StatsReport pending_;
  std::chrono::steady_clock::time_point last_sent_ = std::chrono::steady_clock::now();
};

}  // namespace dtrain::daemon
