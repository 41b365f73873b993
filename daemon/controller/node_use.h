#pragma once
// Which running job holds which node, and how many nodes each owner's running jobs hold: what
// the scheduler keeps other jobs off (docs/architecture/daemon.md, "The controller"). A node
// belongs to a running job while it is one of its members, not dropped (or dropped and on its way
// back in). Not thread-safe: the controller calls it under its lock.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "daemon/config/daemon_config.h"
#include "daemon/controller/job_store.h"

namespace dtrain::daemon {

struct NodeUse {
  std::map<std::string, uint64_t> holder;  // node -> the running job that holds it
  std::map<std::string, int64_t> held_by_owner;
  std::set<std::string> busy() const;
  // Held by a running job other than `job`.
  bool held_by_other(const std::string& node, uint64_t job) const;
};

NodeUse node_use(JobStore& store, const std::vector<uint64_t>& running);

// The nodes `owner` may still take under `limits` beside what its running jobs hold (-1: any
// number; jobs of the cluster key's holder have no limits).
int64_t owner_allowance(const SchedulingLimits& limits, const std::string& owner,
                        const NodeUse& use);

}  // namespace dtrain::daemon
