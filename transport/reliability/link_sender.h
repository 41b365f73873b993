#pragma once
// The sending half of one reliable link (this node -> one peer). Datagrams carrying chunks get
// a link sequence number; they wait in a bounded queue, go out while the bytes in flight stay
// within the receiver's credit, stay buffered until cumulatively acked, and are sent again when
// the receiver NAKs them or when acks stop coming (tail loss). Single-threaded: the endpoint's
// I/O thread owns it.
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <vector>

namespace dtrain::transport {

class LinkSender {
 public:
  using Clock = std::chrono::steady_clock;
  using Body = std::shared_ptr<const std::vector<uint8_t>>;

  explicit LinkSender(size_t initial_credit) : credit_(initial_credit) {}

  uint64_t take_seq() { return next_seq_++; }
  // payload: the application bytes the body carries (what the endpoint's backpressure counts).
  void enqueue(uint64_t seq, Body body, size_t payload) {
    queued_bytes_ += body->size();
    queue_.push_back({seq, std::move(body), payload});
  }

  // Moves what the credit allows from the queue to the wire: send(seq, body) for each.
  template <class Send>
  void transmit(Clock::time_point now, Send&& send) {
    while (!queue_.empty()) {
      const size_t size = queue_.front().body->size();
      if (in_flight_bytes_ + size > credit_ && in_flight_bytes_ > 0) {
        ++credit_stalls_;
        return;
      }
      Pending p = std::move(queue_.front());
      queue_.pop_front();
      queued_bytes_ -= size;
      in_flight_bytes_ += size;
      send(p.seq, *p.body);
      in_flight_.emplace(p.seq, InFlight{std::move(p.body), now, p.payload});
    }
  }

  // Returns the payload bytes acknowledged.
  size_t on_ack(uint64_t cumulative, uint32_t credit, Clock::time_point now) {
    credit_ = credit;
    size_t freed = 0;
    while (!in_flight_.empty() && in_flight_.begin()->first <= cumulative) {
      in_flight_bytes_ -= in_flight_.begin()->second.body->size();
      freed += in_flight_.begin()->second.payload;
      in_flight_.erase(in_flight_.begin());
    }
    if (freed > 0 || in_flight_.empty()) last_progress_ = now;
    return freed;
  }

  // Payload bytes queued or unacknowledged (what a reset of the link throws away).
  size_t pending_payload() const {
    size_t total = 0;
    for (const auto& p : queue_) total += p.payload;
    for (const auto& [seq, f] : in_flight_) total += f.payload;
    return total;
  }

  // Sends again the NAKed datagrams still in flight.
  template <class Send>
  void on_nak(const std::vector<uint64_t>& missing, Clock::time_point now, Send&& send) {
    for (uint64_t seq : missing) {
      auto it = in_flight_.find(seq);
      if (it == in_flight_.end()) continue;
      send(seq, *it->second.body);
      it->second.last_sent = now;
      ++retransmits_;
    }
  }

  // No ack progress for `rto`: the tail may have been lost with nothing after it to reveal the
  // gap, so send the oldest unacked datagrams again.
  template <class Send>
  void on_tick(Clock::time_point now, std::chrono::microseconds rto, Send&& send) {
    if (in_flight_.empty()) {
      last_progress_ = now;
      return;
    }
    if (now - last_progress_ < rto) return;
    int resent = 0;
    for (auto& [seq, f] : in_flight_) {
      if (now - f.last_sent < rto) continue;
      send(seq, *f.body);
      f.last_sent = now;
      ++retransmits_;
      if (++resent == 8) break;
    }
  }

  size_t queued_bytes() const { return queued_bytes_; }
  size_t in_flight_bytes() const { return in_flight_bytes_; }
  uint64_t retransmits() const { return retransmits_; }
  uint64_t credit_stalls() const { return credit_stalls_; }
  bool idle() const { return queue_.empty() && in_flight_.empty(); }

 private:
  struct Pending {
    uint64_t seq;
    Body body;
    size_t payload;
  };
  struct InFlight {
    Body body;
    Clock::time_point last_sent;
    size_t payload;
  };
  uint64_t next_seq_ = 1;
  size_t credit_;
  std::deque<Pending> queue_;
  size_t queued_bytes_ = 0;
  std::map<uint64_t, InFlight> in_flight_;
  size_t in_flight_bytes_ = 0;
  Clock::time_point last_progress_ = Clock::now();
  uint64_t retransmits_ = 0, credit_stalls_ = 0;
};

}  // namespace dtrain::transport
