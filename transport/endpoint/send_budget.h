#pragma once
// The endpoint's backpressure: bytes of this node's own messages queued or unacknowledged, over
// all peers, against a limit. Senders that would exceed it wait (with a deadline); the I/O
// thread releases bytes as acks arrive. Waiters are woken only when one of them can proceed: waking
// them on every ack (thousands per second) cost a whole core in futex calls.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <limits>
#include <mutex>

namespace dtrain::transport {

class SendBudget {
 public:
  explicit SendBudget(size_t limit) : limit_(limit) {}

  // Takes `bytes` from the budget, blocking while it is exhausted (a message larger than the
  // whole limit goes through once nothing else is pending), at most `deadline`; false if it
  // ran out or the budget was closed.
  bool acquire(size_t bytes, std::chrono::milliseconds deadline) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!fits(bytes)) {
      ++waiters_;
      smallest_wanted_ = std::min(smallest_wanted_, bytes);
      const bool ok = ready_.wait_for(lock, deadline, [&] { return closed_ || fits(bytes); });
      if (--waiters_ == 0) smallest_wanted_ = std::numeric_limits<size_t>::max();
      if (!ok || closed_) return false;
    }
    pending_ += bytes;
    return true;
  }

  void release(size_t bytes) {
    if (bytes == 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    pending_ -= std::min(pending_, bytes);
    if (waiters_ > 0 && fits(smallest_wanted_)) ready_.notify_all();
  }

  // Wakes every waiter for good (the endpoint stopped).
  void close() {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    ready_.notify_all();
  }

 private:
  bool fits(size_t bytes) const { return pending_ == 0 || pending_ + bytes <= limit_; }

  const size_t limit_;
  std::mutex mutex_;
  std::condition_variable ready_;
  size_t pending_ = 0;
  size_t waiters_ = 0;
  size_t smallest_wanted_ = std::numeric_limits<size_t>::max();
  bool closed_ = false;
};

}  // namespace dtrain::transport
