#include "transport/reliability/reassembler.h"

#include <cstring>

namespace dtrain::transport {

Reassembler::Result Reassembler::add(const ChunkView& c, std::vector<uint8_t>& message,
                                     Clock::time_point now) {
  if (delivered_.count(c.key)) return Result::kDuplicate;
  if (c.chunk_bytes == 0) return Result::kRejected;
  const size_t chunk_payload = c.chunk_bytes;
  // Every chunk but the last carries exactly chunk_bytes; the sizes must add up.
  const uint64_t expected_count = (uint64_t(c.total_bytes) + chunk_payload - 1) / chunk_payload;
  const size_t expected_size =
      c.index + 1 < c.count ? chunk_payload : c.total_bytes - size_t(c.index) * chunk_payload;
  if (c.count != std::max<uint64_t>(1, expected_count) || c.index >= c.count ||
      c.size != expected_size)
    return Result::kRejected;
  if (c.count == 1) {
    message.assign(c.data, c.data + c.size);
    remember(c.key);
    return Result::kComplete;
  }
  auto it = partial_.find(c.key);
  if (it == partial_.end()) {
    if (bytes_held_ + c.total_bytes > max_bytes_) return Result::kRejected;
    Partial p;
    p.count = c.count;
    p.total_bytes = c.total_bytes;
    p.chunk_bytes = c.chunk_bytes;
    p.have.assign(c.count, false);
    p.bytes.resize(c.total_bytes);
    p.first_seen = now;
    bytes_held_ += c.total_bytes;
    it = partial_.emplace(c.key, std::move(p)).first;
  }
  Partial& p = it->second;
  if (p.count != c.count || p.total_bytes != c.total_bytes || p.chunk_bytes != c.chunk_bytes)
    return Result::kRejected;
  if (p.have[c.index]) return Result::kDuplicate;
  std::memcpy(p.bytes.data() + size_t(c.index) * chunk_payload, c.data, c.size);
  p.have[c.index] = true;
  if (++p.received < p.count) return Result::kIncomplete;
  message.swap(p.bytes);
  bytes_held_ -= p.total_bytes;
  partial_.erase(it);
  remember(c.key);
  return Result::kComplete;
}

size_t Reassembler::expire(Clock::time_point now) {
  size_t dropped = 0;
  for (auto it = partial_.begin(); it != partial_.end();) {
    if (now - it->second.first_seen > timeout_) {
      bytes_held_ -= it->second.total_bytes;
      it = partial_.erase(it);
      ++dropped;
    } else {
      ++it;
    }
  }
  return dropped;
}

void Reassembler::remember(const MessageKey& key) {
  delivered_.insert(key);
  delivered_order_.push_back(key);
  if (delivered_order_.size() > remembered_) {
    delivered_.erase(delivered_order_.front());
    delivered_order_.pop_front();
  }
}

}  // namespace dtrain::transport
