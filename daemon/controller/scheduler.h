#pragma once
// Which job runs next and where (docs/architecture/daemon.md, "The controller"): jobs queue in the
// order submitted and run one at a time; a training job starts once enough live nodes can take it,
// on those with the lowest node ids. Not thread-safe: the controller calls it under its lock.
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "core/spec/job_spec.h"
#include "daemon/controller/membership.h"

namespace dtrain::daemon {

// The nodes a job starts on (by node id), or what it waits for.
struct NodeChoice {
  std::vector<Member*> nodes;
  std::string waiting;  // "waiting for 3 nodes (2 registered)"; empty when it can start
};

// A training job: the live nodes it may run on (a GPU job: those with a GPU), as many as
// training.nodes asks (all of them for `all`; an elastic job: up to its max, at least its min).
NodeChoice choose_training_nodes(const core::TrainingSpec& training, Membership& members);
// A cluster evaluation or inference job: `wanted` live nodes (0: all of them).
NodeChoice choose_task_nodes(int64_t wanted, Membership& members);

class Scheduler {
 public:
  void enqueue(uint64_t id) { queue_.push_back(id); }
  void remove(uint64_t id);
  bool queued(uint64_t id) const;
  // The job to start next: the oldest queued one while none runs (0: none).
  uint64_t next() const { return running_ != 0 || queue_.empty() ? 0 : queue_.front(); }
  // `id`, the front of the queue, runs now.
  void start(uint64_t id);
  // `id` leaves the queue without running (it could not start).
  void drop(uint64_t id) { remove(id); }
  // A job found running (a restarted controller adopts it), or resumed in place.
  void set_running(uint64_t id) { running_ = id; }
  // `id` has ended: the next one may start.
  void ended(uint64_t id) {
    if (running_ == id) running_ = 0;
  }
  uint64_t running() const { return running_; }
  size_t queued_count() const { return queue_.size(); }

 private:
  std::deque<uint64_t> queue_;
  uint64_t running_ = 0;  // 0: none
};

}  // namespace dtrain::daemon
