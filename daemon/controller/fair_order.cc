#include "daemon/controller/fair_order.h"

#include <deque>

#include "daemon/protocol/requester.h"

namespace dtrain::daemon {

bool has_limits(const std::string& owner) { return owner != kClusterKeyHolder; }

UserLimits limits_of(const SchedulingLimits& limits, const std::string& owner) {
  return has_limits(owner) ? limits.of(owner) : UserLimits{};
}

bool may_run_another(const std::string& owner, const std::map<std::string, int64_t>& running,
                     const SchedulingLimits& limits) {
  const int64_t limit = limits_of(limits, owner).running_jobs;
  auto it = running.find(owner);
  return limit <= 0 || (it == running.end() ? 0 : it->second) < limit;
}

std::vector<uint64_t> fair_order(const std::vector<QueuedJob>& queue,
                                 const std::map<std::string, int64_t>& running) {
  std::map<std::string, std::deque<size_t>> waiting;  // each owner's, by position in the queue
  for (size_t i = 0; i < queue.size(); ++i) waiting[queue[i].owner].push_back(i);
  std::map<std::string, int64_t> holds = running;  // and the jobs already put in the order
  std::vector<uint64_t> order;
  for (;;) {
    const std::string* next = nullptr;
    for (const auto& [owner, jobs] : waiting) {
      if (jobs.empty()) continue;
      if (!next || holds[owner] < holds[*next] ||
          (holds[owner] == holds[*next] && jobs.front() < waiting[*next].front()))
        next = &owner;
    }
    if (!next) return order;
    std::deque<size_t>& jobs = waiting[*next];
    order.push_back(queue[jobs.front()].id);
    jobs.pop_front();
    ++holds[*next];
  }
}

}  // namespace dtrain::daemon
