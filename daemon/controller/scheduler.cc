#include "daemon/controller/scheduler.h"

#include <algorithm>

namespace dtrain::daemon {

NodeChoice choose_training_nodes(const core::TrainingSpec& training, Membership& members) {
  NodeChoice out;
  std::vector<Member*> eligible =
      members.alive_by_id([&](const Member& m) { return node_eligible(training, m.offer()); });
  const size_t registered = members.alive_count();
  const size_t wanted = training.nodes > 0 ? size_t(training.nodes) : eligible.size();
  // Elastic (nodes: {min, max}): at least `wanted`, as many as are there up to max.
  const size_t take = training.nodes_max > 0
                          ? std::min(eligible.size(), size_t(training.nodes_max))
                          : wanted;
  if (eligible.empty() || eligible.size() < wanted) {
    const bool gpu = training.device == core::Device::kGpu;
    out.waiting = "waiting for " + std::to_string(std::max<size_t>(1, wanted)) +
                  (gpu ? " nodes with a GPU (" + std::to_string(eligible.size()) + " of " +
                             std::to_string(registered) + " registered have one)"
                       : " nodes (" + std::to_string(registered) + " registered)");
    return out;
  }
  eligible.resize(take);
  out.nodes = std::move(eligible);
  return out;
}

NodeChoice choose_task_nodes(int64_t wanted, Membership& members) {
  NodeChoice out;
  std::vector<Member*> alive = members.alive_by_id([](const Member&) { return true; });
  if (alive.empty() || (wanted > 0 && int64_t(alive.size()) < wanted)) {
    out.waiting = "waiting for " + std::to_string(std::max<int64_t>(1, wanted)) + " nodes (" +
                  std::to_string(alive.size()) + " registered)";
    return out;
  }
  if (wanted > 0) alive.resize(size_t(wanted));
  out.nodes = std::move(alive);
  return out;
}

void Scheduler::remove(uint64_t id) {
  queue_.erase(std::remove(queue_.begin(), queue_.end(), id), queue_.end());
}

bool Scheduler::queued(uint64_t id) const {
  return std::find(queue_.begin(), queue_.end(), id) != queue_.end();
}

void Scheduler::start(uint64_t id) {
  remove(id);
  running_ = id;
}

}  // namespace dtrain::daemon
