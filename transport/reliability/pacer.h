#pragma once
// Spreads a long link's sends over its round trip (docs/architecture/transport.md, "Credit"): a
// token bucket of `rate` bytes a second holding at most `burst`. Unpaced, a sender puts its
// whole credit on the wire at once, and across a long link that credit is far more than the
// queues on the way hold (a host's qdisc, a router's buffer): the end of every burst was lost
// and sent again a round trip later. A rate of 0 turns pacing off (short links: their credit
// is small and the round trip short).
#include <algorithm>
#include <chrono>
#include <cstddef>

namespace dtrain::transport {

class Pacer {
 public:
  using Clock = std::chrono::steady_clock;

  void set(double bytes_per_second, size_t burst) {
    rate_ = bytes_per_second;
    burst_ = double(burst);
    tokens_ = std::min(tokens_, burst_);
  }

  // Takes `bytes` if the bucket holds them now; false: wait (the link's next tick retries).
  bool take(size_t bytes, Clock::time_point now) {
    if (rate_ <= 0) return true;
    const double elapsed_s = std::chrono::duration<double>(now - last_).count();
    tokens_ = last_ == Clock::time_point{} ? burst_ : std::min(burst_, tokens_ + rate_ * elapsed_s);
    last_ = now;
    if (tokens_ < double(bytes)) return false;
    tokens_ -= double(bytes);
    return true;
  }

 private:
  double rate_ = 0, burst_ = 0, tokens_ = 0;
  Clock::time_point last_{};
};

}  // namespace dtrain::transport
