#include "transport/mesh/mesh_map.h"

#include <algorithm>
#include <limits>

namespace dtrain::transport {

MeshMap MeshMap::build(const std::string& mode, std::vector<MeshMember> members,
                       uint64_t version) {
  MeshMap m;
  m.version_ = version;
  m.mode_ = mode;
  for (size_t i = 0; i < members.size(); ++i) {
    if (i == 0) members[i].parent = members[0].id;
    else if (mode == "plain") members[i].parent = members[0].id;
    else members[i].parent = members[(i - 1) / kMaxChildren].id;  // breadth first
  }
  m.members_ = std::move(members);
  return m;
}

bool MeshMap::contains(uint32_t id) const { return find(id) != nullptr; }

const MeshMember* MeshMap::find(uint32_t id) const {
  for (const auto& m : members_)
    if (m.id == id) return &m;
  return nullptr;
}

uint32_t MeshMap::next_hop(uint32_t from, uint32_t to) const {
  const MeshMember* f = find(from);
  if (!f || !contains(to) || from == to) return to;
  // Up from `to`: reaching `from` means it is an ancestor, and the hop is its child on the way.
  uint32_t below = to, at = to;
  for (size_t step = 0; step <= members_.size(); ++step) {
    if (at == from) return below;
    const MeshMember* m = find(at);
    if (!m || m->parent == m->id) break;  // the root
    below = at;
    at = m->parent;
  }
  return f->parent == f->id ? to : f->parent;  // otherwise the path leaves through the parent
}

std::vector<uint32_t> MeshMap::children(uint32_t id) const {
  std::vector<uint32_t> out;
  for (const auto& m : members_)
    if (m.parent == id && m.id != id) out.push_back(m.id);
  return out;
}

std::vector<uint32_t> MeshMap::neighbours(uint32_t id) const {
  std::vector<uint32_t> out;
  const MeshMember* self = find(id);
  if (!self) return out;
  if (self->parent != id) out.push_back(self->parent);
  for (uint32_t c : children(id)) out.push_back(c);
  return out;
}

size_t MeshMap::depth(uint32_t id) const {
  size_t d = 0;
  for (const MeshMember* m = find(id); m && m->parent != m->id && d < members_.size(); ++d)
    m = find(m->parent);
  return d;
}

size_t MeshMap::hops(uint32_t a, uint32_t b) const {
  // a's ancestors with their distance from a; b climbs until it meets one of them.
  std::vector<std::pair<uint32_t, size_t>> up;
  size_t d = 0;
  for (const MeshMember* m = find(a); m && d <= members_.size(); ++d) {
    up.emplace_back(m->id, d);
    if (m->parent == m->id) break;
    m = find(m->parent);
  }
  d = 0;
  for (const MeshMember* m = find(b); m && d <= members_.size(); ++d) {
    for (const auto& [id, from_a] : up)
      if (id == m->id) return from_a + d;
    if (m->parent == m->id) break;
    m = find(m->parent);
  }
  return depth(a) + depth(b);  // not one tree: through both roots
}

size_t MeshMap::longest_path() const {
  size_t longest = 0;
  for (size_t i = 0; i < members_.size(); ++i)
    for (size_t j = i + 1; j < members_.size(); ++j)
      longest = std::max(longest, hops(members_[i].id, members_[j].id));
  return longest;
}

MeshMap MeshMap::without(uint32_t lost, std::vector<uint32_t>* cut_off) const {
  MeshMap next = *this;
  next.version_ = version_ + 1;
  const MeshMember* gone = find(lost);
  if (!gone) return next;
  const bool was_root = gone->parent == lost;
  std::vector<uint32_t> orphans = children(lost);
  // While `lost` relayed for others (it had children), messages in flight through it reached
  // one side and not the other: every survivor may have missed some. A leaf relayed nothing.
  if (cut_off) {
    cut_off->clear();
    if (!orphans.empty())
      for (const auto& m : members_)
        if (m.id != lost) cut_off->push_back(m.id);
  }
  next.members_.erase(std::remove_if(next.members_.begin(), next.members_.end(),
                                     [&](const MeshMember& m) { return m.id == lost; }),
                      next.members_.end());
  if (next.members_.empty()) return next;
  if (was_root) {
    // The first orphan (or, without children, the first member) becomes the root.
    const uint32_t new_root = orphans.empty() ? next.members_[0].id : orphans[0];
    auto it = std::find_if(next.members_.begin(), next.members_.end(),
                           [&](const MeshMember& m) { return m.id == new_root; });
    std::rotate(next.members_.begin(), it, it + 1);
    next.members_[0].parent = new_root;
    orphans.erase(std::remove(orphans.begin(), orphans.end(), new_root), orphans.end());
  }
  for (uint32_t orphan : orphans) {
    // Least loaded among nodes that are not in the orphan's own subtree.
    std::vector<uint32_t> below{orphan};
    for (size_t i = 0; i < below.size(); ++i)
      for (uint32_t c : next.children(below[i])) below.push_back(c);
    uint32_t best = next.members_[0].id;  // plain mode: always the root
    size_t best_children = std::numeric_limits<size_t>::max(), best_depth = 0;
    for (const auto& m : next.members_) {
      if (next.mode_ == "plain") break;
      if (std::find(below.begin(), below.end(), m.id) != below.end()) continue;
      const size_t load = next.children(m.id).size();
      const size_t d = next.depth(m.id);
      if (load < best_children || (load == best_children && d < best_depth)) {
        best = m.id;
        best_children = load;
        best_depth = d;
      }
    }
    for (auto& m : next.members_)
      if (m.id == orphan) m.parent = best;
  }
  return next;
}

MeshMap MeshMap::with(const MeshMember& member) const {
  MeshMap next = contains(member.id) ? without(member.id) : *this;
  next.version_ = version_ + 1;
  MeshMember m = member;
  if (next.members_.empty()) {
    m.parent = m.id;
  } else if (m.parent == m.id || next.mode_ == "plain" || !next.contains(m.parent)) {
    m.parent = next.root();
  }
  next.members_.push_back(m);
  return next;
}

}  // namespace dtrain::transport
