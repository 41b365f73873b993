// Per-operation GPU time (kernels/cuda/op_times.h).
#include "kernels/cuda/op_times.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace dtrain::kernels::cuda {
namespace {

struct Pending {
  const char* label;
  cudaEvent_t start, stop;
};

struct Total {
  int64_t calls = 0;
  double ms = 0.0;
};

// Process-wide: every backend of the process reports into one table.
class OpTimes {
 public:
  cudaEvent_t take_event() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!free_.empty()) {
      cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    if (cudaEventCreate(&e) != cudaSuccess) return nullptr;
    return e;
  }
  void add(const char* label, cudaEvent_t start, cudaEvent_t stop) {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.push_back({label, start, stop});
  }
  void flush() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<Pending> unfinished;
    for (const Pending& p : pending_) {
      if (cudaEventQuery(p.stop) != cudaSuccess) {
        unfinished.push_back(p);
        continue;
      }
      float ms = 0.f;
      if (cudaEventElapsedTime(&ms, p.start, p.stop) == cudaSuccess) {
        Total& t = totals_[p.label];
        ++t.calls;
        t.ms += ms;
      }
      free_.push_back(p.start);
      free_.push_back(p.stop);
    }
    pending_.swap(unfinished);
  }
  void print() {
    if (totals_.empty()) return;
    std::vector<std::pair<std::string, Total>> rows(totals_.begin(), totals_.end());
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
    double all = 0.0;
    for (const auto& r : rows) all += r.second.ms;
    std::fprintf(stderr, "GPU time per operation (DTRAIN_CUDA_OP_TIMES):\n");
    std::fprintf(stderr, "  %-28s %9s %11s %10s %7s\n", "operation", "calls", "total ms",
                 "mean us", "share");
    for (const auto& r : rows)
      std::fprintf(stderr, "  %-28s %9lld %11.2f %10.2f %6.1f%%\n", r.first.c_str(),
                   (long long)r.second.calls, r.second.ms, 1000.0 * r.second.ms / r.second.calls,
                   100.0 * r.second.ms / all);
  }

 private:
  std::mutex mutex_;
  std::vector<cudaEvent_t> free_;
  std::vector<Pending> pending_;
  std::map<std::string, Total> totals_;
};

OpTimes& op_times() {
  static OpTimes* times = new OpTimes;  // never destroyed: the atexit hook below reads it
  return *times;
}

}  // namespace

bool op_times_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("DTRAIN_CUDA_OP_TIMES");
    if (!v || !*v || std::string(v) == "0") return false;
    std::atexit([] { op_times().print(); });
    return true;
  }();
  return enabled;
}

OpTimer::OpTimer(cudaStream_t stream, const char* label) : stream_(stream), label_(label) {
  if (!op_times_enabled()) return;
  start_ = op_times().take_event();
  if (start_) cudaEventRecord(start_, stream_);
}

OpTimer::~OpTimer() {
  if (!start_) return;
  cudaEvent_t stop = op_times().take_event();
  if (!stop) return;
  cudaEventRecord(stop, stream_);
  op_times().add(label_, start_, stop);
}

void flush_op_times() {
  if (op_times_enabled()) op_times().flush();
}

}  // namespace dtrain::kernels::cuda
