#pragma once
// The order in which queued jobs are offered the free nodes (docs/architecture/daemon.md, "The
// controller"): fair between owners, first come first served within one owner. The owner who
// holds the fewest running jobs goes first (ties: whose oldest queued job is older), each job
// taken counting for its owner, so one user's ten queued jobs alternate with another's one
// rather than run before it. Pure: the scheduler's seam, tested without a controller.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "daemon/config/daemon_config.h"

namespace dtrain::daemon {

struct QueuedJob {
  uint64_t id = 0;
  std::string owner;
};

// `queue`: in the order submitted. `running`: each owner's running jobs now.
std::vector<uint64_t> fair_order(const std::vector<QueuedJob>& queue,
                                 const std::map<std::string, int64_t>& running);

// False when `owner` runs as many jobs as its limit lets it (checked as each job starts, so a
// job that waits does not use up its owner's share).
bool may_run_another(const std::string& owner, const std::map<std::string, int64_t>& running,
                     const SchedulingLimits& limits);

// Owners without limits: the cluster key's holder (daemon/protocol/requester.h).
bool has_limits(const std::string& owner);
// The limits that apply to `owner`: none (zeros) for the cluster key's holder.
UserLimits limits_of(const SchedulingLimits& limits, const std::string& owner);

}  // namespace dtrain::daemon
