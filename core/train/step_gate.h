#pragma once
// Staleness control for gradient sharing (docs/architecture/core.md, "Staleness and corrections").
// Counts, per worker of the job and per epoch, the steps whose messages have reached this node's
// bus, and holds a worker back until it may start its next minibatch: with bound K it starts
// minibatch b of an epoch only once minibatches 0..b-K of every live worker are in (bsp is K = 1;
// async, K = 0, never waits). Every local worker empties its inbox before it computes, so "in the
// bus" is "applied". The epoch ends are barriers already, so counts start again at each epoch.
#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <map>
#include <mutex>
#include <vector>

namespace dtrain::core {

class StepGate {
 public:
  // batches[w]: minibatches of worker w's shard per epoch (a worker with a smaller shard is
  // waited for only up to its last minibatch).
  StepGate(int64_t bound, std::vector<int64_t> batches);

  int64_t bound() const { return bound_; }
  int workers() const { return int(batches_.size()); }
  int64_t batches_of(int worker) const { return batches_[worker]; }

  // One step of `worker`'s minibatch `batch` of `epoch` reached the bus (its first segment:
  // a step sends one message per segment). Takeover steps (batch < 0) are counted apart.
  void delivered(int worker, int64_t epoch, int64_t batch);
  // A run resumed from a checkpoint taken after minibatch `done` of `epoch`: every worker's
  // first `done` minibatches of that epoch are in (their updates are in the checkpoint), so
  // nobody waits for messages that will never be sent again.
  void resumed_at(int64_t epoch, int64_t done);

  // Takeover (docs/architecture/core.md, "Staleness and corrections"): after their own minibatches
  // the survivors of a lost node do its remaining ones, dealt round-robin; counts[w] is how many
  // worker w does in `epoch` (0 for the lost). Takeover step k of a worker then waits, as an
  // own step does, for takeover steps 0..k-bound of every other live worker: without it each
  // survivor ran its share blind to the others' and their sum overshot (seen once as a replica
  // at chance after a node loss with a split batch, ~108 takeover steps per survivor).
  void start_takeover(int64_t epoch, std::vector<int64_t> counts);
  template <class Stop>
  bool wait_takeover(int worker, int64_t epoch, int64_t step, std::chrono::milliseconds deadline,
                     Stop stop_waiting, std::vector<int>* waiting);
  // A lost worker is not waited for; an admitted one is again (from the next epoch).
  void set_live(int worker, bool live);
  bool live(int worker) const;

  // Blocks until `worker` may start minibatch `batch` of `epoch`, until `deadline` passes or
  // until stop_waiting() returns true (polled every 50 ms). Returns true when it may start;
  // otherwise `waiting` names the workers it still waits for.
  template <class Stop>
  bool wait(int worker, int64_t epoch, int64_t batch, std::chrono::milliseconds deadline,
            Stop stop_waiting, std::vector<int>* waiting);

  // How many steps of `worker`'s epoch are in (tests).
  int64_t steps_in(int worker, int64_t epoch) const;

 private:
  using Counts = std::vector<std::map<int64_t, int64_t>>;  // per worker: epoch -> steps in
  // Whether every other live worker has min(batch - bound + 1, limits[w]) steps of `epoch` in
  // `have`.
  bool ready(const Counts& have, const std::vector<int64_t>& limits, int worker, int64_t epoch,
             int64_t batch, std::vector<int>* waiting) const;
  template <class Ready, class Stop>
  bool wait_until(Ready ready, std::chrono::milliseconds deadline, Stop stop_waiting);

  const int64_t bound_;
  const std::vector<int64_t> batches_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  Counts steps_;
  Counts takeover_steps_;
  int64_t takeover_epoch_ = -1;
  std::vector<int64_t> takeover_counts_;
  std::vector<char> live_;
};

// How many of `dealt` takeover minibatches, dealt round-robin over the `live` workers in job
// order, each worker of the job does (0 for a lost one). If the gate's live workers are not
// `live` (a loss it has not seen yet), nobody is waited for: the takeover runs as before.
std::vector<int64_t> takeover_counts(const StepGate& gate, int64_t dealt, int live);

template <class Ready, class Stop>
bool StepGate::wait_until(Ready ready, std::chrono::milliseconds deadline, Stop stop_waiting) {
  const auto end = std::chrono::steady_clock::now() + deadline;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!ready()) {
    if (stop_waiting() || std::chrono::steady_clock::now() >= end) return false;
    changed_.wait_for(lock, std::chrono::milliseconds(50));
  }
  return true;
}

template <class Stop>
bool StepGate::wait(int worker, int64_t epoch, int64_t batch, std::chrono::milliseconds deadline,
                    Stop stop_waiting, std::vector<int>* waiting) {
  if (bound_ <= 0 || batch < 0) return true;
  return wait_until([&] { return ready(steps_, batches_, worker, epoch, batch, waiting); },
                    deadline, stop_waiting);
}

template <class Stop>
bool StepGate::wait_takeover(int worker, int64_t epoch, int64_t step,
                             std::chrono::milliseconds deadline, Stop stop_waiting,
                             std::vector<int>* waiting) {
  if (bound_ <= 0) return true;
  return wait_until(
      [&] {
        // Counts of another epoch (or none yet): nothing to wait for.
        if (takeover_epoch_ != epoch) return true;
        return ready(takeover_steps_, takeover_counts_, worker, epoch, step, waiting);
      },
      deadline, stop_waiting);
}

}  // namespace dtrain::core
