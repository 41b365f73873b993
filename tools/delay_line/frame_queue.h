#pragma once
// The frames one direction of a delay line holds: each is released `delay` after it arrived, in
// arrival order (a constant delay never reorders). Bounded in bytes: a frame past the bound is
// dropped, as a router's full queue drops it (docs/operations.md, "Test hosts with latency").
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace dtrain::tools {

class FrameQueue {
 public:
  using Clock = std::chrono::steady_clock;

  FrameQueue(std::chrono::microseconds delay, size_t max_bytes)
      : delay_(delay), max_bytes_(max_bytes) {}

  // Holds a copy of the frame until now + delay; false (and counted) when it would pass the bound.
  bool push(const uint8_t* frame, size_t size, Clock::time_point now);
  // The oldest frame, if its time has come.
  bool due(Clock::time_point now) const { return !frames_.empty() && frames_.front().at <= now; }
  const std::vector<uint8_t>& front() const { return frames_.front().bytes; }
  void pop();
  // How long until the oldest frame is due (zero if it is; `idle` if the queue is empty).
  std::chrono::microseconds wait(Clock::time_point now, std::chrono::microseconds idle) const;

  size_t bytes() const { return bytes_; }
  uint64_t dropped() const { return dropped_; }

 private:
  struct Frame {
    Clock::time_point at;
    std::vector<uint8_t> bytes;
  };
  const std::chrono::microseconds delay_;
  const size_t max_bytes_;
  std::deque<Frame> frames_;
  size_t bytes_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace dtrain::tools
