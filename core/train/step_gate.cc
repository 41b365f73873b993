#include "core/train/step_gate.h"

#include <algorithm>

namespace dtrain::core {

StepGate::StepGate(int64_t bound, std::vector<int64_t> batches)
    : bound_(bound), batches_(std::move(batches)), steps_(batches_.size()),
      takeover_steps_(batches_.size()), live_(batches_.size(), 1) {}

void StepGate::delivered(int worker, int64_t epoch, int64_t batch) {
  if (worker < 0 || worker >= workers()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& per_epoch = (batch < 0 ? takeover_steps_ : steps_)[worker];
    ++per_epoch[epoch];
    // Epoch ends are barriers: nobody waits on an epoch two behind this one again.
    while (per_epoch.size() > 2 && per_epoch.begin()->first < epoch - 1)
      per_epoch.erase(per_epoch.begin());
  }
  changed_.notify_all();
}

void StepGate::resumed_at(int64_t epoch, int64_t done) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int w = 0; w < workers(); ++w)
      steps_[w][epoch] = std::max(steps_[w][epoch], std::min(done, batches_[w]));
  }
  changed_.notify_all();
}

void StepGate::start_takeover(int64_t epoch, std::vector<int64_t> counts) {
  counts.resize(batches_.size(), 0);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    takeover_epoch_ = epoch;
    takeover_counts_ = std::move(counts);
  }
  changed_.notify_all();
}

void StepGate::set_live(int worker, bool live) {
  if (worker < 0 || worker >= workers()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    live_[worker] = live;
  }
  changed_.notify_all();
}

bool StepGate::live(int worker) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return live_[worker] != 0;
}

int64_t StepGate::steps_in(int worker, int64_t epoch) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = steps_[worker].find(epoch);
  return it == steps_[worker].end() ? 0 : it->second;
}

bool StepGate::ready(const Counts& have_steps, const std::vector<int64_t>& limits, int worker,
                     int64_t epoch, int64_t batch, std::vector<int>* waiting) const {
  if (waiting) waiting->clear();
  for (int w = 0; w < workers(); ++w) {
    if (w == worker || !live_[w]) continue;
    // Steps 0..batch-bound of w, or all of them if it has fewer.
    const int64_t need = std::min(batch - bound_ + 1, limits[w]);
    if (need <= 0) continue;
    auto it = have_steps[w].find(epoch);
    const int64_t have = it == have_steps[w].end() ? 0 : it->second;
    if (have < need) {
      if (!waiting) return false;
      waiting->push_back(w);
    }
  }
  return !waiting || waiting->empty();
}

std::vector<int64_t> takeover_counts(const StepGate& gate, int64_t dealt, int live) {
  std::vector<int64_t> counts(size_t(gate.workers()), 0);
  int seen = 0;
  for (int w = 0; w < gate.workers(); ++w) seen += gate.live(w) ? 1 : 0;
  if (seen != live || live <= 0) return counts;
  int index = 0;  // the worker's place among the live ones
  for (int w = 0; w < gate.workers(); ++w)
    if (gate.live(w)) {
      counts[w] = std::max<int64_t>(0, (dealt - index + live - 1) / live);
      ++index;
    }
  return counts;
}

}  // namespace dtrain::core
