#include "transport/reliability/reassembler.h"

#include <algorithm>
#include <cstring>

namespace dtrain::transport {

Reassembler::Result Reassembler::add(const ChunkView& c, std::vector<uint8_t>& message,
                                     uint32_t via, Clock::time_point now) {
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
    if (c.total_bytes > max_bytes_) return Result::kRejected;
    if (!has_room(c.key.origin, c.total_bytes, now)) return Result::kNoRoom;
    Partial p;
    p.count = c.count;
    p.total_bytes = c.total_bytes;
    p.chunk_bytes = c.chunk_bytes;
    p.have.assign(c.count, false);
    p.bytes.resize(c.total_bytes);
    hold(c.key.origin, c.total_bytes);
    it = partial_.emplace(c.key, std::move(p)).first;
  }
  Partial& p = it->second;
  if (p.count != c.count || p.total_bytes != c.total_bytes || p.chunk_bytes != c.chunk_bytes)
    return Result::kRejected;
  // A link that brings a chunk already here still brings the rest: it feeds the message too.
  if (std::find(p.via.begin(), p.via.end(), via) == p.via.end()) p.via.push_back(via);
  if (p.have[c.index]) return Result::kDuplicate;
  p.last_chunk = now;
  std::memcpy(p.bytes.data() + size_t(c.index) * chunk_payload, c.data, c.size);
  p.have[c.index] = true;
  if (++p.received < p.count) return Result::kIncomplete;
  message.swap(p.bytes);
  let_go(c.key.origin, p.total_bytes);
  partial_.erase(it);
  remember(c.key);
  return Result::kComplete;
}

size_t Reassembler::link_restarted(uint32_t via) {
  return drop_if([via](Partial& p) {
    p.via.erase(std::remove(p.via.begin(), p.via.end(), via), p.via.end());
    return p.via.empty();
  });
}

// Room for a new message of `bytes` from `origin`: within the bound once the reservations of
// origins that waited before this one are set aside, and, for an origin that already holds
// partial messages, within its fair share of the bound (split evenly between the origins
// holding partial messages). A lone origin may use the whole bound.
bool Reassembler::has_room(uint32_t origin, size_t bytes, Clock::time_point now) {
  // A sender that stopped asking (lost, or done) gives its turn up.
  for (auto it = reservations_.begin(); it != reservations_.end();)
    it = now - it->second.last_asked > kReservationLife ? reservations_.erase(it) : std::next(it);
  auto mine = reservations_.find(origin);
  size_t ahead = 0;
  for (const auto& [o, r] : reservations_)
    if (o != origin && (mine == reservations_.end() || r.turn < mine->second.turn)) ahead += r.bytes;
  const size_t held = bytes_held_for(origin);
  const size_t origins = held_by_origin_.size() + (held ? 0 : 1);
  const bool fits = bytes_held_ + bytes + ahead <= max_bytes_;
  if (fits && (held == 0 || held + bytes <= max_bytes_ / origins)) {
    if (mine != reservations_.end()) reservations_.erase(mine);
    return true;
  }
  if (!fits) {
    if (mine != reservations_.end()) {
      mine->second.bytes = bytes;
      mine->second.last_asked = now;
    } else if (reservations_.size() < kMaxReservations) {
      reservations_[origin] = {bytes, next_turn_++, now};
    }
  }
  return false;
}

void Reassembler::hold(uint32_t origin, size_t bytes) {
  bytes_held_ += bytes;
  held_by_origin_[origin] += bytes;
}

void Reassembler::let_go(uint32_t origin, size_t bytes) {
  bytes_held_ -= bytes;
  auto it = held_by_origin_.find(origin);
  if (it == held_by_origin_.end()) return;
  it->second -= std::min(it->second, bytes);
  if (it->second == 0) held_by_origin_.erase(it);
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
