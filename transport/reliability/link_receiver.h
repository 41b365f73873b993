#pragma once
// The receiving half of one reliable link (one peer -> this node): which sequence numbers
// arrived, the cumulative ack, and which gaps to NAK (each gap NAKed again after nak_interval
// while it stays open). A sequence number is accepted once; older or repeated ones are
// duplicates. Single-threaded: the endpoint's I/O thread owns it.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

namespace dtrain::transport {

class LinkReceiver {
 public:
  using Clock = std::chrono::steady_clock;
  // Far beyond any credit window: a sequence number this far ahead is a broken or hostile peer.
  static constexpr uint64_t kMaxAhead = 1 << 20;
  static constexpr size_t kMaxNakEntries = 128;

  enum class Accept { kNew, kDuplicate, kTooFarAhead };

  // What accept(seq) would say, changing nothing: the endpoint takes a chunk into reassembly
  // first and acknowledges it only once it was taken (a chunk refused for want of room is
  // not acknowledged, so its sender sends it again).
  Accept peek(uint64_t seq) const {
    if (seq <= cumulative_ || above_.count(seq)) return Accept::kDuplicate;
    if (seq > cumulative_ + kMaxAhead) return Accept::kTooFarAhead;
    return Accept::kNew;
  }
  Accept accept(uint64_t seq) {
    const Accept verdict = peek(seq);
    if (verdict == Accept::kDuplicate) {
      // A retransmission of something we have: our ack was probably lost. Ack again, or the
      // sender's window never empties.
      unacked_ = std::max<uint64_t>(unacked_, 1);
      return verdict;
    }
    if (verdict == Accept::kTooFarAhead) return verdict;
    ++unacked_;
    if (seq == cumulative_ + 1) {
      ++cumulative_;
      while (!above_.empty() && *above_.begin() == cumulative_ + 1) {
        above_.erase(above_.begin());
        ++cumulative_;
      }
      naked_.erase(naked_.begin(), naked_.upper_bound(cumulative_));
    } else {
      above_.insert(seq);
      naked_.erase(seq);
    }
    return Accept::kNew;
  }

  uint64_t cumulative() const { return cumulative_; }
  // What arrived above the cumulative ack, as inclusive [first, last] pairs (at most
  // max_ranges of them, lowest first): the sender frees their credit at once.
  std::vector<uint64_t> received_ranges(size_t max_ranges) const {
    std::vector<uint64_t> out;
    for (uint64_t seq : above_) {
      if (!out.empty() && out.back() + 1 == seq) {
        out.back() = seq;
        continue;
      }
      if (out.size() / 2 == max_ranges) break;
      out.push_back(seq);
      out.push_back(seq);
    }
    return out;
  }
  // An ack is due after `every` new datagrams or `interval` since the last one.
  bool ack_due(Clock::time_point now, uint64_t every, std::chrono::microseconds interval) const {
    return unacked_ > 0 && (unacked_ >= every || now - last_ack_ >= interval);
  }
  void acked(Clock::time_point now) {
    unacked_ = 0;
    last_ack_ = now;
  }

  // Gaps below the highest arrival, not NAKed within nak_interval.
  std::vector<uint64_t> naks_due(Clock::time_point now, std::chrono::microseconds nak_interval) {
    std::vector<uint64_t> out;
    if (above_.empty()) return out;
    const uint64_t highest = *above_.rbegin();
    const uint64_t last = std::min(highest, cumulative_ + 1 + 4 * kMaxNakEntries);
    for (uint64_t seq = cumulative_ + 1; seq < last && out.size() < kMaxNakEntries; ++seq) {
      if (above_.count(seq)) continue;
      auto it = naked_.find(seq);
      if (it != naked_.end() && now - it->second < nak_interval) continue;
      naked_[seq] = now;
      out.push_back(seq);
    }
    return out;
  }

 private:
  uint64_t cumulative_ = 0;
  std::set<uint64_t> above_;
  std::map<uint64_t, Clock::time_point> naked_;
  uint64_t unacked_ = 0;
  Clock::time_point last_ack_{};
};

}  // namespace dtrain::transport
