#pragma once
// Puts messages back together from their chunks, keyed by (origin, message id), with a bound on
// the bytes held and a timeout for messages whose chunks stop coming; and remembers recently
// delivered messages so a duplicate (a retransmission that crossed an ack, or a relay after a
// re-attachment) is never delivered twice.
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
  enum class Result { kIncomplete, kComplete, kDuplicate, kRejected };

  Reassembler(size_t max_bytes, std::chrono::milliseconds timeout, size_t remembered = 1 << 16)
      : max_bytes_(max_bytes), timeout_(timeout), remembered_(remembered) {}

  // kComplete: `message` holds the whole message. kRejected: inconsistent chunk or no memory.
  Result add(const ChunkView& chunk, std::vector<uint8_t>& message,
             Clock::time_point now = Clock::now());
  // Drops partial messages older than the timeout; returns how many.
  size_t expire(Clock::time_point now = Clock::now());
  size_t bytes_held() const { return bytes_held_; }
  size_t partial_messages() const { return partial_.size(); }
  bool delivered(const MessageKey& key) const { return delivered_.count(key) > 0; }

 private:
  struct Partial {
    uint32_t count = 0, received = 0, total_bytes = 0, chunk_bytes = 0;
    std::vector<bool> have;
    std::vector<uint8_t> bytes;
    Clock::time_point first_seen;
  };
  void remember(const MessageKey& key);

  size_t max_bytes_;
  std::chrono::milliseconds timeout_;
  size_t remembered_;
  size_t bytes_held_ = 0;
  std::map<MessageKey, Partial> partial_;
  std::unordered_set<MessageKey, MessageKeyHash> delivered_;
  std::deque<MessageKey> delivered_order_;
};

}  // namespace dtrain::transport
