#include "transport/reliability/credit_tuner.h"

namespace dtrain::transport {

void CreditTuner::took(size_t bytes, Clock::time_point now) {
  if (shortest_ < kLongLink) return;
  if (window_start_ == Clock::time_point{}) window_start_ = now;
  window_bytes_ += bytes;
  if (now - window_start_ < shortest_) return;
  const size_t wanted = 2 * window_bytes_;
  if (wanted > cap_) capped_ = true;
  credit_ = std::clamp(std::max(credit_, wanted), base_, cap_);
  window_start_ = now;
  window_bytes_ = 0;
}

}  // namespace dtrain::transport
