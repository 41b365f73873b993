#pragma once
// A node's workers run an epoch side by side, each on a thread of its own.
#include <thread>
#include <vector>

namespace dtrain::core {

// run(w) for every worker, each on a thread of its own (one worker: on this thread).
template <class Run>
void on_every_worker(int workers, Run& run) {
  if (workers == 1) {
    run(0);
    return;
  }
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) threads.emplace_back(run, w);
  for (auto& t : threads) t.join();
}

}  // namespace dtrain::core
