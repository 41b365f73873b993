#pragma once
// Who relays to whom (docs/architecture/transport.md, "The mesh"). `plain`: every node is a child
// of the root. `mesh`: a breadth-first tree with at most 8 children per node. Messages travel along
// the tree's edges; each node relays to its neighbours except the one a message came from. Maps are
// versioned; a node applies only a newer one. Every node computes the repaired map the same way
// from the same loss, so all survivors agree without a coordinator.
#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::transport {

struct MeshMember {
  uint32_t id = 0;
  std::string address;
  uint16_t port = 0;
  uint32_t parent = 0;  // the root is its own parent
};

class MeshMap {
 public:
  static constexpr size_t kMaxChildren = 8;

  // members[0] is the root; the rest are attached in order.
  static MeshMap build(const std::string& mode, std::vector<MeshMember> members,
                       uint64_t version = 1);

  uint64_t version() const { return version_; }
  const std::string& mode() const { return mode_; }
  const std::vector<MeshMember>& members() const { return members_; }
  bool contains(uint32_t id) const;
  uint32_t root() const { return members_.empty() ? 0 : members_[0].id; }
  const MeshMember* find(uint32_t id) const;

  std::vector<uint32_t> children(uint32_t id) const;
  // Parent (unless `id` is the root) and children.
  std::vector<uint32_t> neighbours(uint32_t id) const;
  // The neighbour of `from` that `to`'s messages reach `from` through: `to` itself when they
  // are neighbours (or either is not in the map).
  uint32_t next_hop(uint32_t from, uint32_t to) const;
  // The hops between the two members farthest apart: how many times a message is sent on its
  // way between them (0 for one member; 2 in a plain mesh of three or more, the root relaying).
  size_t longest_path() const;

  // The map after `lost` left: its children re-attach to the least-loaded live node (fewest
  // children, nearest the root, first in order; in plain mode, the root); a lost root is
  // replaced by its first child. Version + 1. `cut_off` gets the survivors that may have missed
  // messages relayed through `lost` (all of them if it relayed, none if it was a leaf).
  MeshMap without(uint32_t lost, std::vector<uint32_t>* cut_off = nullptr) const;
  // The map with `member` back as a leaf (a restarted node rejoining): under its former
  // parent if that one is still here, else under the root. A member already in the map is
  // taken out first (without), so every node computes the same map from the same one.
  // Version + 1.
  MeshMap with(const MeshMember& member) const;

 private:
  size_t depth(uint32_t id) const;
  size_t hops(uint32_t a, uint32_t b) const;
  uint64_t version_ = 0;
  std::string mode_;
  std::vector<MeshMember> members_;
};

}  // namespace dtrain::transport
