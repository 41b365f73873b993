#include "daemon/controller/scheduler.h"

#include <algorithm>

namespace dtrain::daemon {
namespace {

std::string busy_note(size_t busy) {
  return busy == 0 ? "" : ", " + std::to_string(busy) + " of them busy with other jobs";
}

}  // namespace

NodeChoice choose_training_nodes(const core::TrainingSpec& training, Membership& members,
                                 const NodeUse& use) {
  NodeChoice out;
  const std::vector<Member*> eligible =
      members.alive_by_id([&](const Member& m) { return node_eligible(training, m.offer()); });
  const NodeDemand demand = demand_of(training);
  std::vector<Member*> free;
  for (Member* m : eligible)
    if (use.fits(m->offer(), demand)) free.push_back(m);
  const size_t registered = members.alive_count();
  const size_t wanted = training.nodes > 0 ? size_t(training.nodes) : eligible.size();
  // Elastic (nodes: {min, max}): at least `wanted`, as many as are free up to max.
  const size_t take = training.nodes_max > 0
                          ? std::min(free.size(), size_t(training.nodes_max))
                          : wanted;
  if (free.empty() || free.size() < wanted) {
    const bool gpu = training.device == core::Device::kGpu;
    const size_t held = eligible.size() - free.size();
    out.waiting = "waiting for " + std::to_string(std::max<size_t>(1, wanted)) +
                  (gpu ? " nodes with a GPU (" + std::to_string(eligible.size()) + " of " +
                             std::to_string(registered) + " registered have one" +
                             busy_note(held) + ")"
                       : " nodes (" + std::to_string(registered) + " registered" +
                             busy_note(held) + ")");
    out.waits_for_busy = !eligible.empty() && eligible.size() >= wanted;
    return out;
  }
  free.resize(take);
  out.nodes = std::move(free);
  return out;
}

NodeChoice choose_task_nodes(int64_t wanted, Membership& members,
                             const std::set<std::string>& busy) {
  NodeChoice out;
  const std::vector<Member*> alive = members.alive_by_id([](const Member&) { return true; });
  std::vector<Member*> free;
  for (Member* m : alive)
    if (!busy.count(m->name)) free.push_back(m);
  const size_t needed = size_t(std::max<int64_t>(1, wanted));
  if (free.size() < needed) {
    out.waiting = "waiting for " + std::to_string(needed) + " nodes (" +
                  std::to_string(alive.size()) + " registered" +
                  busy_note(alive.size() - free.size()) + ")";
    out.waits_for_busy = alive.size() >= needed;
    return out;
  }
  if (wanted > 0) free.resize(size_t(wanted));
  out.nodes = std::move(free);
  return out;
}

void Scheduler::enqueue(uint64_t id, const std::string& owner) {
  if (!queued(id)) queue_.push_back({id, owner});
}

void Scheduler::remove(uint64_t id) {
  queue_.erase(std::remove_if(queue_.begin(), queue_.end(),
                              [&](const QueuedJob& q) { return q.id == id; }),
               queue_.end());
}

bool Scheduler::queued(uint64_t id) const {
  return std::any_of(queue_.begin(), queue_.end(), [&](const QueuedJob& q) { return q.id == id; });
}

std::vector<uint64_t> Scheduler::offer_order() const {
  return fair_order(queue_, running_per_owner());
}

void Scheduler::start(uint64_t id) {
  std::string owner;
  for (const QueuedJob& q : queue_)
    if (q.id == id) owner = q.owner;
  set_running(id, owner);
}

void Scheduler::set_running(uint64_t id, const std::string& owner) {
  remove(id);
  running_[id] = owner;
}

std::vector<uint64_t> Scheduler::running_ids() const {
  std::vector<uint64_t> out;
  for (const auto& [id, owner] : running_) out.push_back(id);
  return out;
}

std::map<std::string, int64_t> Scheduler::running_per_owner() const {
  std::map<std::string, int64_t> out;
  for (const auto& [id, owner] : running_) ++out[owner];
  return out;
}

}  // namespace dtrain::daemon
