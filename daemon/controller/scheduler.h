#pragma once
// Which jobs run and where (docs/architecture/daemon.md, "The controller"): several jobs run at
// once, each on nodes no other job holds or on shares of nodes beside other shares. Queued jobs
// are offered the nodes in a fair order between their owners (fair_order.h); a training job
// starts once enough live nodes have room for it, on those with the lowest node ids. Not
// thread-safe: the controller calls it under its lock.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/spec/job_spec.h"
#include "daemon/config/daemon_config.h"
#include "daemon/controller/fair_order.h"
#include "daemon/controller/membership.h"
#include "daemon/controller/node_use.h"

namespace dtrain::daemon {

// The nodes a job starts on (by node id), or what it waits for.
struct NodeChoice {
  std::vector<Member*> nodes;
  std::string waiting;  // "waiting for 3 nodes (2 registered)"; empty when it can start
  // It waits only for nodes other jobs hold: it keeps its place, and the jobs after it in the
  // queue wait behind it (else a stream of small jobs could hold a large one back forever).
  bool waits_for_busy = false;
};

// A training job: the live nodes it may run on (a GPU job: those with a GPU) where it fits
// beside what the running jobs hold (`use`: a job of whole nodes, on nodes no job holds; a
// share, where that many cores and GPUs are left), as many as training.nodes asks (all of them
// for `all`: it waits until every eligible node has room; an elastic job: up to its max, at
// least its min).
NodeChoice choose_training_nodes(const core::TrainingSpec& training, Membership& members,
                                 const NodeUse& use);
// A cluster evaluation or inference job: `wanted` free live nodes (0: every free one, at least 1).
NodeChoice choose_task_nodes(int64_t wanted, Membership& members,
                             const std::set<std::string>& busy);

// What came of offering a queued job the free nodes.
enum class StartOutcome {
  kStarted,
  kWaits,          // for nodes not registered, or its owner's limit: the jobs after it may go
  kWaitsForBusy,   // for nodes other jobs hold: it keeps its place, the jobs after it wait
  kEnded,          // it failed before starting (a record that no longer parses, a task whose
                   // folder cannot be made)
};

class Scheduler {
 public:
  void enqueue(uint64_t id, const std::string& owner);
  void remove(uint64_t id);
  bool queued(uint64_t id) const;
  // The queued jobs in the order they are offered the free nodes (fair_order.h).
  std::vector<uint64_t> offer_order() const;
  // `id` leaves the queue and runs now.
  void start(uint64_t id);
  // `id` leaves the queue without running (it could not start).
  void drop(uint64_t id) { remove(id); }
  // A job found running (a restarted controller adopts it), or resumed in place.
  void set_running(uint64_t id, const std::string& owner);
  // `id` has ended: its nodes are free.
  void ended(uint64_t id) { running_.erase(id); }
  bool running(uint64_t id) const { return running_.count(id) > 0; }
  std::vector<uint64_t> running_ids() const;
  // Each owner's running jobs.
  std::map<std::string, int64_t> running_per_owner() const;
  size_t queued_count() const { return queue_.size(); }

 private:
  std::vector<QueuedJob> queue_;  // in the order submitted (a resume: when it was asked)
  std::map<uint64_t, std::string> running_;  // id -> owner
};

}  // namespace dtrain::daemon
