#pragma once
// Staleness control for gradient sharing (core/README.md, "Staleness and corrections"). Counts, per
// worker of the job and per epoch, the steps whose messages have reached this node's bus, and holds
// a worker back until it may start its next minibatch: with bound K it starts minibatch b of an
// epoch only once minibatches 0..b-K of every live worker are in (bsp is K = 1; async, K = 0, never
// waits). Every local worker empties its inbox before it computes, so "in the bus" is "applied".
// The epoch ends are barriers already, so counts start again at each epoch.
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
  // a step sends one message per segment). Takeover steps (batch < 0) are not counted.
  void delivered(int worker, int64_t epoch, int64_t batch);
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
  bool ready(int worker, int64_t epoch, int64_t batch, std::vector<int>* waiting) const;

  const int64_t bound_;
  const std::vector<int64_t> batches_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::map<int64_t, int64_t>> steps_;  // per worker: epoch -> steps in
  std::vector<char> live_;
};

template <class Stop>
bool StepGate::wait(int worker, int64_t epoch, int64_t batch, std::chrono::milliseconds deadline,
                    Stop stop_waiting, std::vector<int>* waiting) {
  if (bound_ <= 0 || batch < 0) return true;
  const auto end = std::chrono::steady_clock::now() + deadline;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!ready(worker, epoch, batch, waiting)) {
    if (stop_waiting() || std::chrono::steady_clock::now() >= end) return false;
    changed_.wait_for(lock, std::chrono::milliseconds(50));
  }
  return true;
}

}  // namespace dtrain::core
