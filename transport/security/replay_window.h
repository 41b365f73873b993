#pragma once
// Per-sender replay protection: a datagram counter is accepted once. Counters may arrive out
// of order within the window (1024 behind the highest seen); older ones are refused. A new boot
// id (the peer restarted) starts a new window.
//
// The seen bits are a ring of 64-bit words indexed by the counter itself (RFC 6479's scheme):
// moving the window forward clears only the words it passes, where a shifted bitset moved all
// 1024 bits for every in-order datagram (2% of a receiving I/O thread).
#include <array>
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
      words_.fill(0);
    }
    if (counter == 0) return false;
    if (counter > highest_) {
      // The words between the old highest's and the new one's now hold counters that have not
      // been seen: clear them (all of them after a jump past the whole ring).
      const uint64_t from = highest_ / 64, to = counter / 64;
      const uint64_t passed = to - from < kWords ? to - from : kWords;
      for (uint64_t i = 1; i <= passed; ++i) words_[(from + i) % kWords] = 0;
      highest_ = counter;
    } else if (highest_ - counter >= kWindow) {
      return false;
    }
    uint64_t& word = words_[(counter / 64) % kWords];
    const uint64_t bit = uint64_t(1) << (counter % 64);
    if (word & bit) return false;
    word |= bit;
    return true;
  }

 private:
  // One word more than the window: the newest word is only partly inside it, and every counter
  // within kWindow of the highest must still have its bit.
  static constexpr uint64_t kWords = kWindow / 64 + 1;
  uint64_t boot_id_ = 0;
  uint64_t highest_ = 0;
  std::array<uint64_t, kWords> words_{};
};

}  // namespace dtrain::transport
