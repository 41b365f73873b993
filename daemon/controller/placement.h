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
  uint32_t cores = 0;  // the cores it takes there; 0: the whole node
};

// What a job takes of each node it runs on: the whole node (the default), or a share
// (training.cores_per_node / gpus_per_node) beside which other shares fit. A share of GPUs alone
// takes a core for each.
struct NodeDemand {
  bool whole = true;
  uint32_t cores = 0, gpus = 0;
};
NodeDemand demand_of(const core::TrainingSpec& training);

// True when the job may run on the node (device: gpu needs a GPU there; a share needs that many
// cores and GPUs in all).
bool node_eligible(const core::TrainingSpec& training, const NodeOffer& node);

// Its workers on `node`: for a job of whole nodes, the node as registered; for a share, the part
// of the node no other job holds (NodeUse::free_part), whose first GPUs it takes.
NodePlacement place_on(const core::TrainingSpec& training, const NodeOffer& node);

struct Refusal {
  std::string error, fix;
};
// A job the registered nodes can never run as asked (device: gpu without enough GPU nodes, a
// share larger than enough of them);
// nothing when it can run, or when no node has registered yet (it waits for nodes).
std::optional<Refusal> refuse_placement(const core::TrainingSpec& training,
                                        const std::vector<NodeOffer>& alive);

}  // namespace dtrain::daemon
