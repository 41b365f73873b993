#include "tools/delay_line/frame_queue.h"

#include <algorithm>

namespace dtrain::tools {

bool FrameQueue::push(const uint8_t* frame, size_t size, Clock::time_point now) {
  if (bytes_ + size > max_bytes_) {
    ++dropped_;
    return false;
  }
  frames_.push_back(Frame{now + delay_, std::vector<uint8_t>(frame, frame + size)});
  bytes_ += size;
  return true;
}

void FrameQueue::pop() {
  bytes_ -= frames_.front().bytes.size();
  frames_.pop_front();
}

std::chrono::microseconds FrameQueue::wait(Clock::time_point now,
                                           std::chrono::microseconds idle) const {
  if (frames_.empty()) return idle;
  const auto left = std::chrono::duration_cast<std::chrono::microseconds>(frames_.front().at - now);
  return std::max(left, std::chrono::microseconds(0));
}

}  // namespace dtrain::tools
