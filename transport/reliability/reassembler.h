#pragma once
// Puts messages back together from their chunks, keyed by (origin, message id), with a bound on
// the bytes held, shared fairly between origins (one origin's burst cannot take the room every
// other origin needs); and remembers recently delivered messages so a duplicate (a
// retransmission that crossed an ack, or a relay after a re-attachment) is never delivered twice.
//
// A chunk taken here has been acknowledged: its sender let it go. So a partial message is never
// dropped for age while a link that fed it is alive (that link's sender holds the rest, queued
// or in flight, however long a relay backlog makes it wait): a CI run once lost a 2 MB message
// this way, its first chunks taken and its partial dropped 30 s later while the rest waited.
// A partial is dropped only when every link that fed it started over (its sender dropped
// what it held: links_restarted) or stayed lost past the timeout (expire).
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <unordered_set>
#include <vector>

namespace dtrain::transport {

struct MessageKey {
  uint64_t job_id = 0;
  uint32_t origin = 0;
  uint64_t message_id = 0;
  bool operator<(const MessageKey& o) const {
    return std::tie(job_id, origin, message_id) < std::tie(o.job_id, o.origin, o.message_id);
  }
  bool operator==(const MessageKey& o) const {
    return job_id == o.job_id && origin == o.origin && message_id == o.message_id;
  }
};

struct MessageKeyHash {
  size_t operator()(const MessageKey& k) const {
    return std::hash<uint64_t>()(k.job_id * 0x9E3779B97F4A7C15ull ^ (uint64_t(k.origin) << 40) ^
                                 k.message_id);
  }
};

struct ChunkView {
  MessageKey key;
  uint32_t index = 0, count = 0, total_bytes = 0, chunk_bytes = 0;
  const uint8_t* data = nullptr;
  size_t size = 0;
};

class Reassembler {
 public:
  using Clock = std::chrono::steady_clock;
  // kNoRoom: a new message that does not fit now (the bound, or its origin's fair share of it);
  // the caller leaves the chunk unacknowledged and it comes again. kRejected: never fits (an
  // inconsistent chunk, or a message larger than the whole bound).
  enum class Result { kIncomplete, kComplete, kDuplicate, kRejected, kNoRoom };

  Reassembler(size_t max_bytes, std::chrono::milliseconds timeout, size_t remembered = 1 << 16)
      : max_bytes_(max_bytes), timeout_(timeout), remembered_(remembered) {}

  // kComplete: `message` holds the whole message. `via`: the link (peer) the chunk came by.
  Result add(const ChunkView& chunk, std::vector<uint8_t>& message, uint32_t via,
             Clock::time_point now = Clock::now());
  // The sending half of link `via` started over (the peer restarted or reset the link) or the
  // link is gone: what it would still have sent will never come. Partials no other link fed
  // are dropped; returns how many.
  size_t link_restarted(uint32_t via);
  // Drops partials that no chunk reached for the timeout while none of the links that fed them
  // is alive (`alive(link)`); returns how many.
  template <class Alive>
  size_t expire(Clock::time_point now, Alive&& alive) {
    return drop_if([&](const Partial& p) {
      if (now - p.last_chunk <= timeout_) return false;
      for (uint32_t link : p.via)
        if (alive(link)) return false;
      return true;
    });
  }
  size_t bytes_held() const { return bytes_held_; }
  size_t bytes_held_for(uint32_t origin) const {
    auto it = held_by_origin_.find(origin);
    return it == held_by_origin_.end() ? 0 : it->second;
  }
  size_t partial_messages() const { return partial_.size(); }
  bool delivered(const MessageKey& key) const { return delivered_.count(key) > 0; }

 private:
  struct Partial {
    uint32_t count = 0, received = 0, total_bytes = 0, chunk_bytes = 0;
    std::vector<bool> have;
    std::vector<uint8_t> bytes;
    Clock::time_point last_chunk;
    std::vector<uint32_t> via;  // the links that fed it (one, but for a re-attachment)
  };
  template <class Drop>
  size_t drop_if(Drop&& drop) {
    size_t dropped = 0;
    for (auto it = partial_.begin(); it != partial_.end();) {
      if (drop(it->second)) {
        let_go(it->first.origin, it->second.total_bytes);
        it = partial_.erase(it);
        ++dropped;
      } else {
        ++it;
      }
    }
    return dropped;
  }
  void remember(const MessageKey& key);
  bool has_room(uint32_t origin, size_t bytes, Clock::time_point now);
  void hold(uint32_t origin, size_t bytes);
  void let_go(uint32_t origin, size_t bytes);

  size_t max_bytes_;
  std::chrono::milliseconds timeout_;
  size_t remembered_;
  size_t bytes_held_ = 0;
  std::map<uint32_t, size_t> held_by_origin_;  // origins with partial messages only
  // Origins refused for room wait in turn: each reserves the room its message needs, and an
  // origin that asks later must leave room for the reservations made before its own (without
  // them an origin that streams back-to-back messages would take the room each time it frees).
  struct Reservation {
    size_t bytes = 0;
    uint64_t turn = 0;
    Clock::time_point last_asked;
  };
  static constexpr size_t kMaxReservations = 1024;
  static constexpr std::chrono::seconds kReservationLife{2};  // senders ask again within 1 s
  std::map<uint32_t, Reservation> reservations_;
  uint64_t next_turn_ = 0;
  std::map<MessageKey, Partial> partial_;
  std::unordered_set<MessageKey, MessageKeyHash> delivered_;
  std::deque<MessageKey> delivered_order_;
};

}  // namespace dtrain::transport
