#include "transport/mesh/mesh_node.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace dtrain::transport {

MeshNode::MeshNode(Endpoint& endpoint, const MeshMap& map, Handlers handlers)
    : endpoint_(endpoint),
      self_(endpoint.node_id()),
      handlers_(std::move(handlers)),
      map_(map),
      original_(map) {
  for (const MeshMember& m : map.members())
    if (m.id != self_) endpoint_.add_peer(m.id, m.address, m.port);
}

MeshMap MeshNode::map() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return map_;
}

void MeshNode::retain(uint64_t job_id, uint32_t origin, uint64_t message_id,
                      Endpoint::Bytes bytes) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mutex_);
  retained_bytes_ += bytes->size();
  retained_.push_back({now, job_id, origin, message_id, std::move(bytes)});
  while (!retained_.empty() &&
         (now - retained_.front().at > endpoint_.peer_timeout() + kRetentionMargin ||
          retained_bytes_ > kRetentionBytes)) {
    retained_bytes_ -= retained_.front().bytes->size();
    retained_.pop_front();
  }
}

bool MeshNode::publish(uint64_t job_id, uint64_t message_id, Endpoint::Bytes bytes,
                       std::chrono::milliseconds deadline) {
  retain(job_id, self_, message_id, bytes);
  bool ok = true;
  for (uint32_t n : map().neighbours(self_))
    ok = endpoint_.send(n, job_id, self_, message_id, bytes, deadline) && ok;
  return ok;
}

bool MeshNode::send_to(uint32_t to, uint64_t job_id, uint64_t message_id, Endpoint::Bytes bytes,
                       bool wait, std::chrono::milliseconds deadline) {
  return endpoint_.send(to, direct_job_id(job_id), self_, message_id, std::move(bytes),
                        wait ? deadline : std::chrono::milliseconds(0),
                        wait ? Endpoint::SendKind::kOwn : Endpoint::SendKind::kRelay);
}

void MeshNode::handle_direct(Delivery&& d) {
  if (d.from != d.origin || !handlers_.on_message) return;
  d.job_id = direct_job_id(d.job_id);
  handlers_.on_message(d);
}

void MeshNode::handle_delivery(Delivery&& d) {
  // Relay first (without waiting: this is the I/O thread), then hand it up.
  auto shared = std::make_shared<const std::vector<uint8_t>>(std::move(d.bytes));
  retain(d.job_id, d.origin, d.message_id, shared);
  for (uint32_t n : map().neighbours(self_))
    if (n != d.from && n != d.origin)
      endpoint_.send(n, d.job_id, d.origin, d.message_id, shared, std::chrono::milliseconds(0),
                     Endpoint::SendKind::kRelay);
  if (handlers_.on_message) {
    Delivery up{d.job_id, d.origin, d.message_id, d.from, *shared};
    handlers_.on_message(up);
  }
}

std::vector<uint32_t> MeshNode::replace_map(MeshMap next, std::optional<uint32_t> rejoining,
                                            std::vector<Retained>& catch_up) {
  const std::vector<uint32_t> before = map_.neighbours(self_);
  map_ = std::move(next);
  std::vector<uint32_t> fresh;
  for (uint32_t n : map_.neighbours(self_))
    if (n == rejoining || std::find(before.begin(), before.end(), n) == before.end())
      fresh.push_back(n);
  if (!fresh.empty()) catch_up.assign(retained_.begin(), retained_.end());
  return fresh;
}

void MeshNode::send_catch_up(const std::vector<uint32_t>& to,
                             const std::vector<Retained>& retained) {
  // Their reassemblers drop what they already have.
  for (uint32_t n : to)
    for (const Retained& r : retained)
      if (r.origin != n)
        endpoint_.send(n, r.job_id, r.origin, r.message_id, r.bytes,
                       std::chrono::milliseconds(0), Endpoint::SendKind::kRelay);
}

void MeshNode::add_member(uint32_t id) {
  MeshMember member;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const MeshMember* found = original_.find(id);
    if (!found || id == self_) return;
    member = *found;
  }
  rejoin(member);
}

void MeshNode::add_member(const MeshMember& member) {
  if (member.id == self_ || member.address.empty()) return;
  MeshMember leaf = member;
  leaf.parent = leaf.id;  // under the root, on every node alike
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!original_.contains(leaf.id)) original_ = original_.with(leaf);
  }
  rejoin(leaf);
}

void MeshNode::rejoin(const MeshMember& member) {
  const uint32_t id = member.id;
  std::vector<Retained> catch_up;
  std::vector<uint32_t> fresh;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    fresh = replace_map(map_.with(member), id, catch_up);
  }
  endpoint_.add_peer(id, member.address, member.port);  // live again (it was declared lost)
  // If it was still in the map (it restarted before anyone noticed it was gone), taking it out
  // and back in may have re-attached others: what it was relaying goes again along the new
  // edges, as after a loss.
  send_catch_up(fresh, catch_up);
  spdlog::info("node {}: node {} rejoins the mesh", self_, id);
}

void MeshNode::handle_peer_lost(uint32_t peer) {
  std::vector<uint32_t> missed;
  uint64_t version;
  std::vector<Retained> catch_up;
  std::vector<uint32_t> fresh;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!map_.contains(peer)) return;
    fresh = replace_map(map_.without(peer, &missed), std::nullopt, catch_up);
    version = map_.version();
  }
  // New neighbours get what this node saw recently.
  send_catch_up(fresh, catch_up);
  spdlog::warn("node {}: node {} lost; mesh map version {} re-attaches its children", self_, peer,
               version);
  if (handlers_.on_loss) handlers_.on_loss(peer, missed, version);
}

}  // namespace dtrain::transport
