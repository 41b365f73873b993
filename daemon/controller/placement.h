#pragma once
// Where a job's workers go (docs/architecture/daemon.md, "The controller"): which nodes may take
// it, whether a node's workers run on its GPUs or its CPU, and how many there are. Pure functions
// of the spec and what the nodes registered, so the rules are unit-tested without daemons.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/spec/job_spec.h"

namespace dtrain::daemon {

struct NodeOffer {
  std::string name;
  uint32_t cores = 1;
  std::vector<uint32_t> gpus;  // CUDA ordinals the node lets jobs use
};

struct NodePlacement {
  bool gpu = false;
  int workers = 1;
  // Worker w runs on gpus[w % gpus.size()] (several workers may share a GPU, each on its own
  // stream); empty on the CPU.
  std::vector<uint32_t> gpus;
};

// True when the job may run on the node (device: gpu needs a GPU there).
bool node_eligible(const core::TrainingSpec& training, const NodeOffer& node);

NodePlacement place_on(const core::TrainingSpec& training, const NodeOffer& node);

struct Refusal {
  std::string error, fix;
};
// A job the registered nodes can never run as asked (device: gpu without enough GPU nodes);
// nothing when it can run, or when no node has registered yet (it waits for nodes).
std::optional<Refusal> refuse_placement(const core::TrainingSpec& training,
                                        const std::vector<NodeOffer>& alive);

}  // namespace dtrain::daemon
