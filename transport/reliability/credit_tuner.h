#pragma once
// The credit a receiver offers one peer (docs/architecture/transport.md, "Credit"). A link
// carries at most its credit a round trip, so a fixed credit caps a long link: 512 KiB is
// 10 MB/s across 50 ms. The credit starts at the configured base and, across links whose
// shortest round trip is long, follows what the peer delivered: each time a shortest round
// trip passes, it becomes twice the bytes taken during it (dynamic right-sizing, the way
// Linux sizes a TCP receive window), so a sender held by its credit doubles it every round
// trip until the line's rate holds it instead. A credit larger than the queues on the way (a
// router's, the sender's own qdisc) loses the end of a burst even when the sender paces it
// (transport/reliability/pacer.h): a round trip in which this node had to NAK a gap halves
// the credit, and from then on it grows by the base a round trip at most (additive increase,
// multiplicative decrease, as TCP's congestion window). It never shrinks below the base nor
// grows above the cap (what the socket's receive buffer holds).
//
// Links with a short round trip keep the base: there a burst lands in the receive buffer
// rather than in the network, and the base already allows base / RTT (2.6 GB/s at 0.2 ms).
// The shortest round trip seen is the line's own delay; the smoothed one also counts the time
// a loaded process takes to answer, which must not grow the credit of a loopback link.
#include <algorithm>
#include <chrono>
#include <cstddef>

namespace dtrain::transport {

class CreditTuner {
 public:
  using Clock = std::chrono::steady_clock;
  // Below this shortest round trip the credit stays at the base.
  static constexpr std::chrono::microseconds kLongLink{2000};

  CreditTuner(size_t base, size_t cap)
      : base_(base), cap_(std::max(base, cap)), credit_(base), ceiling_(cap_) {}

  size_t credit() const { return credit_; }
  size_t cap() const { return cap_; }
  // Whether the credit wanted to grow past the cap at least once (the socket's receive buffer
  // is smaller than the link's rate times its round trip).
  bool capped() const { return capped_; }
  // The shortest round trip seen: the line's own; 0 until measured.
  std::chrono::microseconds shortest_round_trip() const { return shortest_; }
  bool long_link() const { return shortest_ >= kLongLink; }

  // A round trip measured now (the heartbeats').
  void round_trip(std::chrono::microseconds rtt) {
    if (rtt.count() > 0 && (shortest_.count() == 0 || rtt < shortest_)) shortest_ = rtt;
  }
  // `bytes` of the peer's data taken now.
  void took(size_t bytes, Clock::time_point now);
  // A gap in the peer's sequence was NAKed now: its datagrams were lost on the way.
  void lost();
  // The peer started over: back to the base.
  void reset() {
    credit_ = base_;
    ceiling_ = cap_;
    loss_in_window_ = false;
    window_bytes_ = 0;
    window_start_ = Clock::time_point{};
  }

 private:
  // At the end of a round trip without loss: doubling below the ceiling, one base above it.
  void grow();

  size_t base_, cap_, credit_;
  size_t ceiling_;  // where doubling stops: the cap until the first loss, then half the credit
  bool loss_in_window_ = false;
  bool capped_ = false;
  std::chrono::microseconds shortest_{0};
  Clock::time_point window_start_{};
  size_t window_bytes_ = 0;
};

}  // namespace dtrain::transport
