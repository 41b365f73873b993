#pragma once
// Per-sender replay protection: a datagram counter is accepted once. Counters may arrive out
// of order within the window (1024 behind the highest seen); older ones are refused. A new boot
// id (the peer restarted) starts a new window.
#include <bitset>
#include <cstdint>

namespace dtrain::transport {

class ReplayWindow {
 public:
  static constexpr uint64_t kWindow = 1024;

  // True (and remembered) when (boot_id, counter) was not seen before and is not too old.
  bool accept(uint64_t boot_id, uint64_t counter) {
    if (boot_id != boot_id_) {
      boot_id_ = boot_id;
      highest_ = 0;
      seen_.reset();
    }
    if (counter == 0) return false;
    if (counter > highest_) {
      const uint64_t shift = counter - highest_;
      seen_ = shift >= kWindow ? std::bitset<kWindow>() : seen_ << shift;
      seen_.set(0);
      highest_ = counter;
      return true;
    }
    const uint64_t age = highest_ - counter;
    if (age >= kWindow || seen_.test(age)) return false;
    seen_.set(age);
    return true;
  }

 private:
  uint64_t boot_id_ = 0;
  uint64_t highest_ = 0;
  std::bitset<kWindow> seen_;  // bit k: counter highest_ - k was seen
};

}  // namespace dtrain::transport
