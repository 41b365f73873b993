#pragma once
// The sending half of one reliable link (this node -> one peer). Chunks wait in two queues,
// this node's own messages and the ones it relays for others, which share the link equally
// when both have something (a relay node's own updates must not wait behind everything it
// forwards); each chunk gets its link sequence number as it first goes out, while the bytes in
// flight stay within the receiver's credit; chunks stay buffered until acknowledged, and are sent
// again when the receiver NAKs them or when acks stop coming (tail loss). A chunk is a reference
// into its message: the datagram is built only when it goes out, so queueing costs no copy and no
// allocation per chunk. Single-threaded: the endpoint's I/O thread owns it.
#include <chrono>
#include <cstdint>
#include <algorithm>
#include <deque>
#include <memory>
#include <vector>

#include "transport/reliability/pacer.h"

namespace dtrain::transport {

// A message on its way to one or more peers (shared by their links and by retransmissions).
struct OutgoingMessage {
  uint64_t job_id = 0;
  uint32_t origin = 0;
  uint64_t message_id = 0;
  std::shared_ptr<const std::vector<uint8_t>> bytes;
  bool relayed = false;  // forwarded for another node (else this node's own message)
  uint32_t chunk_count = 0;
  uint32_t chunk_payload = 0;  // bytes per chunk (the last one may carry fewer)
};

struct OutgoingChunk {
  // Framing around a chunk's bytes, for credit accounting (the credit counts datagram bytes).
  static constexpr size_t kFramingBytes = 96;
  std::shared_ptr<const OutgoingMessage> message;
  uint32_t index = 0;
  uint32_t payload = 0;  // application bytes it carries
  size_t wire_bytes() const { return payload + kFramingBytes; }
  const uint8_t* data() const {
    return message->bytes->data() + size_t(index) * message->chunk_payload;
  }
};

class LinkSender {
 public:
  using Clock = std::chrono::steady_clock;

  explicit LinkSender(size_t initial_credit) : credit_(initial_credit) {}

  void enqueue(OutgoingChunk chunk) {
    queued_bytes_ += chunk.wire_bytes();
    if (chunk.message->relayed) relayed_bytes_ += chunk.wire_bytes();
    Queue& q = chunk.message->relayed ? relayed_ : own_;
    if (q.chunks.empty()) q.sent = std::max(q.sent, other(q).sent);  // no credit for idle time
    q.chunks.push_back(std::move(chunk));
  }

  // Moves what the credit allows from the queues to the wire: send(seq, chunk) for each.
  template <class Send>
  void transmit(Clock::time_point now, Send&& send) {
    while (!own_.chunks.empty() || !relayed_.chunks.empty()) {
      Queue& q = next_queue();
      const size_t size = q.chunks.front().wire_bytes();
      if (in_flight_bytes_ + size > credit_ && in_flight_bytes_ > 0) {
        ++credit_stalls_;
        return;
      }
      if (!pacer_.take(size, now)) return;  // the link's next tick sends it
      OutgoingChunk chunk = std::move(q.chunks.front());
      q.chunks.pop_front();
      q.sent += size;
      queued_bytes_ -= size;
      in_flight_bytes_ += size;
      const uint64_t seq = next_seq_++;
      send(seq, chunk);
      in_flight_.push_back(InFlight{std::move(chunk), now});
      ++in_flight_count_;
    }
  }

  // What one ack says (wire::Ack, docs/architecture/transport.md "The data channel").
  struct AckReport {
    uint64_t cumulative = 0;  // every sequence number up to it arrived
    uint32_t credit = 0;      // the receiver's window, in wire bytes
    // Selectively acknowledged inclusive ranges [first, last] above `cumulative`, as pairs.
    const uint64_t* received = nullptr;
    size_t received_len = 0;
    // Chunks refused for want of reassembly room (LinkReceiver::refused), and their bytes.
    uint32_t refused = 0;
    uint32_t refused_bytes = 0;
    // Wire bytes taken above `cumulative` that the ranges could not list (an ack lists only
    // the lowest few ranges).
    uint32_t unlisted_bytes = 0;
  };

  // Bytes the receiver holds do not count against the credit, whether it refused them for room
  // or took them without room in the ack to list them: the credit bounds what is still on its
  // way. Else refused or unlisted chunks of one message fill the window and block the chunks
  // of the message that holds the room, a deadlock (seen with parameter averaging through a
  // small reassembly budget: refused chunks interleave with taken ones, so the taken ones
  // make far more ranges than an ack lists). A receiver that refuses is alive, and busy.
  // Returns the payload bytes of own messages acknowledged (for the send budget).
  size_t on_ack(const AckReport& ack, Clock::time_point now) {
    credit_ = size_t(ack.credit) + ack.refused_bytes + ack.unlisted_bytes;
    if (ack.refused > 0) last_busy_ = now;
    size_t freed = 0;
    const size_t before = in_flight_count_;
    // Releases sequence numbers [first, last] that are in flight. The ack's numbers are clamped
    // to what was sent, and each slot is visited at most once per ack: the receiver lists its
    // ranges in ascending order (LinkReceiver::received_ranges), so `next` only moves up, and
    // overlapping or repeated ranges cannot make one ack walk the window many times. (A range
    // below `next` releases only what lies above it.)
    const uint64_t base = first_in_flight();  // no slot leaves until every range is done
    uint64_t next = base;
    auto release = [&](uint64_t first, uint64_t last) {
      for (uint64_t seq = std::max(first, next); seq <= last && seq < next_seq_; ++seq) {
        next = seq + 1;
        InFlight& f = in_flight_[seq - base];
        if (!f.chunk.message) continue;  // acknowledged before
        in_flight_bytes_ -= f.chunk.wire_bytes();
        if (f.chunk.message->relayed)
          relayed_bytes_ -= f.chunk.wire_bytes();
        else
          freed += f.chunk.payload;
        f.chunk.message.reset();
        --in_flight_count_;
      }
    };
    release(next, ack.cumulative);
    for (size_t i = 0; i + 1 < ack.received_len; i += 2)
      release(ack.received[i], ack.received[i + 1]);
    while (!in_flight_.empty() && !in_flight_.front().chunk.message) in_flight_.pop_front();
    if (in_flight_count_ < before || in_flight_count_ == 0) last_progress_ = now;
    return freed;
  }

  // Payload bytes of this node's own messages queued or unacknowledged (what a reset of the
  // link gives back to the send budget; relayed bytes never took from it).
  size_t pending_own_payload() const {
    size_t total = 0;
    for (const auto& c : own_.chunks) total += c.payload;
    for (const InFlight& f : in_flight_)
      if (f.chunk.message && !f.chunk.message->relayed) total += f.chunk.payload;
    return total;
  }

  // Sends again the NAKed datagrams still in flight, unless sent within `min_gap` (about one
  // round trip): the receiver re-NAKs a gap every millisecond, and on a loaded machine the round
  // trip is far longer, so every repeat would otherwise go out again (a retransmission storm).
  template <class Send>
  void on_nak(const std::vector<uint64_t>& missing, Clock::time_point now,
              std::chrono::microseconds min_gap, Send&& send) {
    const uint64_t base = first_in_flight();
    for (uint64_t seq : missing) {
      if (seq < base || seq >= next_seq_) continue;
      InFlight& f = in_flight_[seq - base];
      if (!f.chunk.message || now - f.last_sent < min_gap) continue;
      send(seq, f.chunk);
      f.last_sent = now;
      ++retransmits_;
    }
  }

  // No ack progress for `rto`: the tail may have been lost with nothing after it to reveal the
  // gap, so send the oldest unacked datagrams again.
  template <class Send>
  void on_tick(Clock::time_point now, std::chrono::microseconds rto, Send&& send) {
    if (in_flight_count_ == 0) {
      last_progress_ = now;
      return;
    }
    if (now - last_progress_ < rto) return;
    // Also while the receiver refuses chunks for room (it NAKs them once it has room): the
    // timer must still find a lost tail, which nothing else reveals. At most 8 per tick.
    int resent = 0;
    uint64_t seq = first_in_flight();
    for (InFlight& f : in_flight_) {
      const uint64_t this_seq = seq++;
      if (!f.chunk.message || now - f.last_sent < rto) continue;
      send(this_seq, f.chunk);
      f.last_sent = now;
      ++retransmits_;
      if (++resent == 8) break;
    }
  }

  // Something is in flight and nothing of it was acknowledged for `limit`, nor did the peer
  // say it refused chunks for want of room: it stopped acknowledging (heartbeats alone do not
  // keep a link alive that never drains).
  bool not_acknowledging(Clock::time_point now, std::chrono::milliseconds limit) const {
    return in_flight_count_ > 0 && now - std::max(last_progress_, last_busy_) > limit;
  }
  // Wire bytes of relayed chunks queued or in flight (bounded by the endpoint: backpressure).
  size_t relayed_bytes() const { return relayed_bytes_; }
  size_t queued_bytes() const { return queued_bytes_; }
  size_t in_flight_bytes() const { return in_flight_bytes_; }
  uint64_t retransmits() const { return retransmits_; }
  uint64_t credit_stalls() const { return credit_stalls_; }
  // The receiver's last offer (plus what it holds outside it).
  size_t credit() const { return credit_; }
  Pacer& pacer() { return pacer_; }
  bool idle() const {
    return own_.chunks.empty() && relayed_.chunks.empty() && in_flight_count_ == 0;
  }

 private:
  struct Queue {
    std::deque<OutgoingChunk> chunks;
    size_t sent = 0;  // wire bytes taken from it, for the equal share
  };
  Queue& other(const Queue& q) { return &q == &own_ ? relayed_ : own_; }
  Queue& next_queue() {
    if (own_.chunks.empty()) return relayed_;
    if (relayed_.chunks.empty()) return own_;
    return own_.sent <= relayed_.sent ? own_ : relayed_;
  }

  // What was sent and not yet acknowledged, one slot per sequence number from
  // first_in_flight() to next_seq_ - 1 (a deque indexed by the number: no tree node or
  // allocation per datagram). A slot acknowledged out of order (selectively) is emptied
  // (chunk.message null) and leaves once every slot before it has.
  struct InFlight {
    OutgoingChunk chunk;
    Clock::time_point last_sent;
  };
  uint64_t first_in_flight() const { return next_seq_ - in_flight_.size(); }
  uint64_t next_seq_ = 1;
  size_t credit_;
  Queue own_, relayed_;
  size_t queued_bytes_ = 0;
  size_t relayed_bytes_ = 0;
  std::deque<InFlight> in_flight_;
  size_t in_flight_count_ = 0;  // slots still holding a chunk
  size_t in_flight_bytes_ = 0;
  Clock::time_point last_progress_ = Clock::now();
  Clock::time_point last_busy_{};  // the last ack that reported chunks refused for room
  uint64_t retransmits_ = 0, credit_stalls_ = 0;
  Pacer pacer_;
};

}  // namespace dtrain::transport
