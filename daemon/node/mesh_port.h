#pragma once
// What MeshExchange needs of the mesh: two calls. The daemon passes the job's MeshNode
// (JobMesh below); the in-process tests pass a fake that connects several exchanges
// directly (tests/unit/mesh_exchange_test), so the epoch barrier, the takeover, rejoining
// and parameter averaging are tested without sockets.
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "transport/mesh/mesh_node.h"

namespace dtrain::daemon {

class MeshPort {
 public:
  virtual ~MeshPort() = default;
  // Hands `bytes` (message `message_id` of this node, ids increasing) to every other member of
  // the job, each exactly once; false when the mesh could not take it within `deadline`.
  virtual bool publish(uint64_t message_id, std::shared_ptr<const std::vector<uint8_t>> bytes,
                       std::chrono::milliseconds deadline) = 0;
  // `bytes` to member `to` alone, not relayed (mode allreduce's ring; message ids of their own,
  // increasing). `wait` false: never blocks (a network handler's answer). False when it could
  // not be sent (no such member, or past the deadline).
  virtual bool send_to(uint32_t to, uint64_t message_id,
                       std::shared_ptr<const std::vector<uint8_t>> bytes, bool wait,
                       std::chrono::milliseconds deadline) {
    (void)to, (void)message_id, (void)bytes, (void)wait, (void)deadline;
    return false;
  }
  // Member `id` (restarted) is part of the mesh again: relay to it and accept its messages.
  virtual void add_member(uint32_t id) = 0;
  // A node new to the job (elastic membership, MeshNode::add_member) is part of the mesh now.
  virtual void add_new_member(const transport::MeshMember& member) = 0;
  // The member that `member`'s messages reach this node through (itself when direct): a stall
  // report names a silent relay (in plain mode the root relays everything).
  virtual uint32_t relay_of(uint32_t member) const { return member; }
};

// One job's view of a node's MeshNode.
class JobMesh : public MeshPort {
 public:
  JobMesh(transport::MeshNode& mesh, uint64_t job_id) : mesh_(mesh), job_id_(job_id) {}
  bool publish(uint64_t message_id, std::shared_ptr<const std::vector<uint8_t>> bytes,
               std::chrono::milliseconds deadline) override {
    return mesh_.publish(job_id_, message_id, std::move(bytes), deadline);
  }
  bool send_to(uint32_t to, uint64_t message_id, std::shared_ptr<const std::vector<uint8_t>> bytes,
               bool wait, std::chrono::milliseconds deadline) override {
    return mesh_.send_to(to, job_id_, message_id, std::move(bytes), wait, deadline);
  }
  void add_member(uint32_t id) override { mesh_.add_member(id); }
  void add_new_member(const transport::MeshMember& member) override {
    mesh_.add_member(member);
  }
  uint32_t relay_of(uint32_t member) const override {
    return mesh_.map().next_hop(mesh_.self(), member);
  }

 private:
  transport::MeshNode& mesh_;
  uint64_t job_id_;
};

}  // namespace dtrain::daemon
