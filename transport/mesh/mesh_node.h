#pragma once
// A node's place in the mesh: publishes its messages to its tree neighbours, hands every
// message to the layer above exactly once (the endpoint's reassembler drops repeats by
// (job, origin, message id)), relays each to its neighbours except the one it came from, and
// repairs the tree when the endpoint declares a peer lost, telling the layer above which nodes
// may have missed messages.
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <vector>

#include "transport/endpoint/endpoint.h"
#include "transport/mesh/mesh_map.h"

namespace dtrain::transport {

// The job id a job's point-to-point messages travel under (MeshNode::send_to): the endpoint
// delivers them apart from the job's relayed ones, and no node relays them.
constexpr uint64_t kDirectJobBit = uint64_t(1) << 63;
inline uint64_t direct_job_id(uint64_t job_id) { return job_id ^ kDirectJobBit; }

class MeshNode {
 public:
  struct Handlers {
    // On the endpoint's I/O thread; may take the delivery's bytes (they are not used after).
    std::function<void(Delivery&)> on_message;
    std::function<void(uint32_t lost, const std::vector<uint32_t>& may_have_missed,
                       uint64_t map_version)>
        on_loss;
  };

  // Adds every member of the map as a peer of the endpoint. The endpoint's owner (which may
  // carry several jobs on it) passes this job's deliveries and every peer loss to
  // handle_delivery / handle_peer_lost.
  MeshNode(Endpoint& endpoint, const MeshMap& map, Handlers handlers);

  // On the endpoint's I/O thread. handle_direct: a delivery under direct_job_id(job), handed up
  // as the job's (not relayed, and taken only from its origin itself).
  void handle_delivery(Delivery&& d);
  void handle_direct(Delivery&& d);
  void handle_peer_lost(uint32_t peer);

  // To every other node along the tree. False if the endpoint's queues stayed full past the
  // deadline.
  bool publish(uint64_t job_id, uint64_t message_id, Endpoint::Bytes bytes,
               std::chrono::milliseconds deadline = std::chrono::milliseconds(10000));

  // To member `to` alone, not relayed (a ring all-reduce's parts). `wait`: false from a thread
  // that must not block (an I/O handler): queued at once, like a relayed message. False for a
  // member that is not a peer, or past the deadline.
  bool send_to(uint32_t to, uint64_t job_id, uint64_t message_id, Endpoint::Bytes bytes,
               bool wait, std::chrono::milliseconds deadline = std::chrono::milliseconds(10000));

  MeshMap map() const;
  uint32_t self() const { return self_; }

  // A member of the original map restarted and rejoins (MeshMap::with); if it becomes a
  // neighbour it gets what this node saw recently, like a re-attached child.
  void add_member(uint32_t id);
  // A node new to the job (elastic membership) joins as a leaf under the root; it is then a
  // member like the others (one that restarts later rejoins with add_member(id)).
  void add_member(const MeshMember& member);

  // Messages kept for catching up new neighbours after a repair: a node can relay a message
  // before it has itself noticed the loss (and so to the old neighbours only). Nodes notice a
  // loss at most one peer timeout apart, so that (plus a margin) is all that is kept; more
  // turns every repair, and every false alarm, into a flood.
  static constexpr std::chrono::seconds kRetentionMargin{2};
  static constexpr size_t kRetentionBytes = 64 << 20;

 private:
  struct Retained {
    std::chrono::steady_clock::time_point at;
    uint64_t job_id;
    uint32_t origin;
    uint64_t message_id;
    Endpoint::Bytes bytes;
  };
  void rejoin(const MeshMember& member);  // into the map, and a peer of the endpoint again
  void retain(uint64_t job_id, uint32_t origin, uint64_t message_id, Endpoint::Bytes bytes);
  // Under mutex_: installs `next`; returns the neighbours it adds (and `rejoining`, if it is a
  // neighbour: it starts over), with what they need to catch up in `catch_up`.
  std::vector<uint32_t> replace_map(MeshMap next, std::optional<uint32_t> rejoining,
                                    std::vector<Retained>& catch_up);
  void send_catch_up(const std::vector<uint32_t>& to, const std::vector<Retained>& retained);

  Endpoint& endpoint_;
  uint32_t self_;
  Handlers handlers_;
  mutable std::mutex mutex_;
  MeshMap map_;
  MeshMap original_;  // as built (and joined): where a rejoining member was; under mutex_
  std::deque<Retained> retained_;  // guarded by mutex_
  size_t retained_bytes_ = 0;
};

}  // namespace dtrain::transport
