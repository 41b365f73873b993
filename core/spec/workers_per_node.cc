#include "core/spec/workers_per_node.h"

#include <algorithm>

namespace dtrain::core {

// Small models scale better across replicas than across threads of one GEMM, up to a point:
// beyond 8 replicas on one node the updates they exchange cost more than they gain.
constexpr unsigned kMaxAutoCpuWorkers = 8;

int workers_per_node(const TrainingSpec& training, unsigned cores, size_t gpus) {
  if (training.mode == TrainingMode::kParameterAveraging) return 1;
  if (training.workers_per_node > 0) return static_cast<int>(training.workers_per_node);
  if (gpus > 0) return static_cast<int>(gpus);
  return static_cast<int>(std::clamp(cores, 1u, kMaxAutoCpuWorkers));
}

}  // namespace dtrain::core
