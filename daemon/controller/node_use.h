#pragma once
// What the running jobs hold of each node, and how many nodes each owner's running jobs hold:
// what the scheduler keeps other jobs off (docs/architecture/daemon.md, "The controller"). A
// job holds a node while it is one of its members, not dropped (or dropped and on its way back
// in): the whole node, or its share (cores and GPUs, placement.h) beside other shares. Not
// thread-safe: the controller calls it under its lock.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "daemon/config/daemon_config.h"
#include "daemon/controller/job_store.h"
#include "daemon/controller/placement.h"

namespace dtrain::daemon {

// One job's hold on a node, from the members entry the controller placed it with (an entry
// without `cores`, from a release before shares, holds the whole node).
struct NodeHold {
  uint64_t job = 0;
  bool whole = true;
  uint32_t cores = 0;
  std::vector<uint32_t> gpus;
};
NodeHold hold_of(uint64_t job, const Json& member);

struct NodeUse {
  std::map<std::string, std::vector<NodeHold>> holds;  // node -> the running jobs' holds
  std::map<std::string, int64_t> held_by_owner;        // nodes (each counted once)

  // Nodes some running job holds (whole-node jobs and tasks wait for these to be free).
  std::set<std::string> busy() const;
  bool held(const std::string& node) const { return holds.count(node) > 0; }
  // The running jobs on `node`, by id.
  std::vector<uint64_t> jobs_on(const std::string& node) const;
  // Whether `demand` fits beside what jobs other than `except` hold of `node`.
  bool fits(const NodeOffer& node, const NodeDemand& demand, uint64_t except = 0) const;
  // Whether `hold` (a job's place on `node` as it was: a resume, a rejoin) is free again of the
  // other jobs: the whole node, or that many cores and those very GPUs.
  bool room_for(const NodeOffer& node, const NodeHold& hold) const;
  // `node` less what jobs other than `except` hold: the cores left and the GPUs no job holds.
  NodeOffer free_part(const NodeOffer& node, uint64_t except = 0) const;
};

NodeUse node_use(JobStore& store, const std::vector<uint64_t>& running);

// The nodes `owner` may still take under `limits` beside what its running jobs hold (-1: any
// number; jobs of the cluster key's holder have no limits).
int64_t owner_allowance(const SchedulingLimits& limits, const std::string& owner,
                        const NodeUse& use);

}  // namespace dtrain::daemon
