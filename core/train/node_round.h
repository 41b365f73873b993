#pragma once
// The workers of one node meet at a round of local steps (docs/architecture/core.md, "Local
// steps"): each arrives with its replica; the last to arrive runs the round for all of them
// (their mean goes to the mesh as one message, and every replica takes the result); everyone
// leaves once it ran. A stop (another worker's error, a cancel) releases those still waiting.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace dtrain::core {

class NodeRound {
 public:
  explicit NodeRound(int workers) : workers_(workers) {}

  // Returns true once the round ran (by this thread or another), false when stopped() turned
  // true first. An exception of `run` reaches its caller; the others are released.
  template <class Run, class Stopped>
  bool arrive(Run run, Stopped stopped);

 private:
  const int workers_;
  std::mutex mutex_;
  std::condition_variable done_;
  int arrived_ = 0;
  int64_t generation_ = 0;  // rounds run so far
};

template <class Run, class Stopped>
bool NodeRound::arrive(Run run, Stopped stopped) {
  std::unique_lock<std::mutex> lock(mutex_);
  const int64_t generation = generation_;
  if (++arrived_ == workers_) {
    auto release = [&] {
      arrived_ = 0;
      ++generation_;
      done_.notify_all();
    };
    try {
      run();  // the others wait here; the lock keeps a late stop from counting them out
    } catch (...) {
      release();
      throw;
    }
    release();
    return true;
  }
  while (generation_ == generation) {
    if (stopped()) {
      --arrived_;
      return false;
    }
    done_.wait_for(lock, std::chrono::milliseconds(50));
  }
  return true;
}

}  // namespace dtrain::core
