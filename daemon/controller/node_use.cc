#include "daemon/controller/node_use.h"

#include <algorithm>

#include "daemon/controller/fair_order.h"

namespace dtrain::daemon {

NodeHold hold_of(uint64_t job, const Json& member) {
  NodeHold h;
  h.job = job;
  const uint32_t cores = member.is_object() ? member.value("cores", 0u) : 0u;
  if (cores == 0) return h;
  h.whole = false;
  h.cores = cores;
  h.gpus = member.value("gpus", std::vector<uint32_t>{});
  return h;
}

std::set<std::string> NodeUse::busy() const {
  std::set<std::string> out;
  for (const auto& [node, list] : holds) out.insert(node);
  return out;
}

std::vector<uint64_t> NodeUse::jobs_on(const std::string& node) const {
  std::vector<uint64_t> out;
  auto it = holds.find(node);
  if (it != holds.end())
    for (const NodeHold& h : it->second) out.push_back(h.job);
  return out;
}

NodeOffer NodeUse::free_part(const NodeOffer& node, uint64_t except) const {
  NodeOffer out = node;
  auto it = holds.find(node.name);
  if (it == holds.end()) return out;
  for (const NodeHold& h : it->second) {
    if (h.job == except) continue;
    if (h.whole) return {node.name, 0, {}};
    out.cores -= std::min(out.cores, h.cores);
    for (uint32_t g : h.gpus) out.gpus.erase(std::remove(out.gpus.begin(), out.gpus.end(), g),
                                             out.gpus.end());
  }
  return out;
}

bool NodeUse::fits(const NodeOffer& node, const NodeDemand& demand, uint64_t except) const {
  auto it = holds.find(node.name);
  const bool others = it != holds.end() &&
                      std::any_of(it->second.begin(), it->second.end(),
                                  [&](const NodeHold& h) { return h.job != except; });
  if (demand.whole) return !others;
  const NodeOffer left = free_part(node, except);
  return left.cores >= demand.cores && left.gpus.size() >= demand.gpus && left.cores > 0;
}

bool NodeUse::room_for(const NodeOffer& node, const NodeHold& hold) const {
  if (hold.whole) return fits(node, NodeDemand{}, hold.job);
  const NodeOffer left = free_part(node, hold.job);
  if (left.cores < hold.cores) return false;
  return std::all_of(hold.gpus.begin(), hold.gpus.end(), [&](uint32_t g) {
    return std::find(left.gpus.begin(), left.gpus.end(), g) != left.gpus.end();
  });
}

int64_t owner_allowance(const SchedulingLimits& limits, const std::string& owner,
                        const NodeUse& use) {
  const int64_t limit = limits_of(limits, owner).nodes;
  if (limit <= 0) return -1;
  auto held = use.held_by_owner.find(owner);
  return std::max<int64_t>(0, limit - (held == use.held_by_owner.end() ? 0 : held->second));
}

NodeUse node_use(JobStore& store, const std::vector<uint64_t>& running) {
  NodeUse use;
  std::map<std::string, std::set<std::string>> owned;  // owner -> nodes
  for (uint64_t id : running) {
    const JobRecord* job = store.find(id);
    if (!job) continue;
    for (const std::string& n : job->nodes) {
      if (job->dropped(n) && !listed(job->rejoining, n)) continue;
      Json entry;
      for (const Json& m : job->members)
        if (m.value("name", std::string()) == n) entry = m;
      use.holds[n].push_back(hold_of(id, entry));
      owned[job->owner].insert(n);
    }
  }
  for (const auto& [owner, nodes] : owned) use.held_by_owner[owner] = int64_t(nodes.size());
  return use;
}

}  // namespace dtrain::daemon
