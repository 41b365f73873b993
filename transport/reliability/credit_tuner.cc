#include "transport/reliability/credit_tuner.h"

namespace dtrain::transport {

void CreditTuner::took(size_t bytes, Clock::time_point now) {
  if (!long_link()) return;
  if (window_start_ == Clock::time_point{}) window_start_ = now;
  window_bytes_ += bytes;
  if (now - window_start_ < shortest_) return;
  if (!loss_in_window_) grow();
  window_start_ = now;
  window_bytes_ = 0;
  loss_in_window_ = false;
}

void CreditTuner::grow() {
  const size_t wanted = 2 * window_bytes_;
  if (wanted <= credit_) return;  // the peer did not use its credit: nothing to learn
  size_t next = credit_ < ceiling_ ? std::min(wanted, ceiling_) : credit_ + base_;
  if (next > cap_) {
    capped_ = true;
    next = cap_;
  }
  credit_ = std::max(credit_, next);
}

void CreditTuner::lost() {
  // One loss a round trip: the NAKs of one burst's tail come over several ticks.
  if (!long_link() || loss_in_window_) return;
  loss_in_window_ = true;
  credit_ = std::max(base_, credit_ / 2);
  ceiling_ = credit_;
}

}  // namespace dtrain::transport
