#include "daemon/controller/node_use.h"

#include <algorithm>

#include "daemon/controller/fair_order.h"

namespace dtrain::daemon {

std::set<std::string> NodeUse::busy() const {
  std::set<std::string> out;
  for (const auto& [node, job] : holder) out.insert(node);
  return out;
}

bool NodeUse::held_by_other(const std::string& node, uint64_t job) const {
  auto it = holder.find(node);
  return it != holder.end() && it->second != job;
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
  for (uint64_t id : running) {
    const JobRecord* job = store.find(id);
    if (!job) continue;
    for (const std::string& n : job->nodes) {
      if (job->dropped(n) && !listed(job->rejoining, n)) continue;
      if (use.holder.emplace(n, id).second) ++use.held_by_owner[job->owner];
    }
  }
  return use;
}

}  // namespace dtrain::daemon
