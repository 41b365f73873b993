#pragma once
// The receiving half of one reliable link (one peer -> this node): which sequence numbers
// arrived, the cumulative ack, and which gaps to NAK (each gap NAKed again after nak_interval
// while it stays open). A sequence number is accepted once; older or repeated ones are
// duplicates. Single-threaded: the endpoint's I/O thread owns it.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
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
  // `wire_bytes`: the chunk's size, held against nobody's credit once taken (Ranges).
  Accept accept(uint64_t seq, uint32_t wire_bytes) {
    const Accept verdict = peek(seq);
    if (verdict == Accept::kDuplicate) {
      // A retransmission of something we have: our ack was probably lost. Ack again, or the
      // sender's window never empties.
      unacked_ = std::max<uint64_t>(unacked_, 1);
      return verdict;
    }
    if (verdict == Accept::kTooFarAhead) return verdict;
    forget_refusal(seq);
    ++unacked_;
    if (seq == cumulative_ + 1) {
      ++cumulative_;
      while (!above_.empty() && above_.begin()->first == cumulative_ + 1) {
        above_bytes_ -= above_.begin()->second;
        above_.erase(above_.begin());
        ++cumulative_;
      }
      naked_.erase(naked_.begin(), naked_.upper_bound(cumulative_));
    } else {
      above_.emplace(seq, wire_bytes);
      above_bytes_ += wire_bytes;
      naked_.erase(seq);
    }
    return Accept::kNew;
  }

  // A new chunk `seq` (of `wire_bytes`) that reassembly refused for want of room: it stays
  // unacknowledged and is not NAKed (its sender sends it again on its own timer), and the acks
  // say how many such chunks and bytes are outstanding. The sender counts those bytes outside
  // its credit (else refused chunks of one message fill the window and block the chunks of
  // the message that holds the room: a deadlock), and knows this peer is alive and busy,
  // not dead. At most kMaxRefused are remembered.
  static constexpr size_t kMaxRefused = 16384;
  void refused(uint64_t seq, uint32_t wire_bytes) {
    if (refused_.size() >= kMaxRefused && !refused_.count(seq)) return;
    auto [it, added] = refused_.emplace(seq, wire_bytes);
    if (added) refused_bytes_ += wire_bytes;
    unacked_ = std::max<uint64_t>(unacked_, 1);  // an ack soon: the sender learns it is busy
  }
  size_t refused_count() const { return refused_.size(); }
  // Room was freed (a message completed or expired): the refused chunks, to be NAKed now (all
  // of them: the periodic NAKs look only just above the cumulative ack, and the chunks a
  // partial message still lacks can lie far beyond it). They stay refused, their bytes outside
  // the sender's credit, until they are taken: were the credit to shrink back while they are
  // in flight again, the sender could not send the rest of the message that holds the room.
  std::vector<uint64_t> refused_to_ask_again() const {
    std::vector<uint64_t> seqs;
    seqs.reserve(refused_.size());
    for (const auto& [seq, bytes] : refused_) seqs.push_back(seq);
    return seqs;
  }
  uint64_t refused_bytes() const { return refused_bytes_; }

  uint64_t cumulative() const { return cumulative_; }
  // What arrived above the cumulative ack: inclusive [first, last] pairs (at most max_ranges
  // of them, lowest first), which the sender frees at once, and the wire bytes of the rest,
  // which it counts outside its credit. Chunks refused for room interleave with taken ones, so
  // the taken ones can make far more ranges than an ack has room for.
  struct Ranges {
    std::vector<uint64_t> pairs;
    uint64_t unlisted_bytes = 0;
  };
  Ranges received_ranges(size_t max_ranges) const {
    Ranges out;
    uint64_t listed = 0;
    for (const auto& [seq, bytes] : above_) {
      if (!out.pairs.empty() && out.pairs.back() + 1 == seq) {
        out.pairs.back() = seq;
      } else {
        if (out.pairs.size() / 2 == max_ranges) break;
        out.pairs.push_back(seq);
        out.pairs.push_back(seq);
      }
      listed += bytes;
    }
    out.unlisted_bytes = above_bytes_ - listed;
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
    const uint64_t highest = above_.rbegin()->first;
    const uint64_t last = std::min(highest, cumulative_ + 1 + 4 * kMaxNakEntries);
    for (uint64_t seq = cumulative_ + 1; seq < last && out.size() < kMaxNakEntries; ++seq) {
      if (above_.count(seq) || refused_.count(seq)) continue;
      auto it = naked_.find(seq);
      if (it != naked_.end() && now - it->second < nak_interval) continue;
      naked_[seq] = now;
      out.push_back(seq);
    }
    return out;
  }

 private:
  void forget_refusal(uint64_t seq) {
    auto it = refused_.find(seq);
    if (it == refused_.end()) return;
    refused_bytes_ -= it->second;
    refused_.erase(it);
  }

  uint64_t cumulative_ = 0;
  std::map<uint64_t, uint32_t> above_;  // seq -> wire bytes, taken above the cumulative ack
  uint64_t above_bytes_ = 0;
  std::map<uint64_t, Clock::time_point> naked_;
  uint64_t unacked_ = 0;
  Clock::time_point last_ack_{};
  std::map<uint64_t, uint32_t> refused_;  // seq -> wire bytes, refused for room
  uint64_t refused_bytes_ = 0;
};

}  // namespace dtrain::transport
