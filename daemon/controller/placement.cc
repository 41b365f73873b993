#include "daemon/controller/placement.h"

#include "core/spec/workers_per_node.h"

namespace dtrain::daemon {

bool node_eligible(const core::TrainingSpec& training, const NodeOffer& node) {
  return training.device != core::Device::kGpu || !node.gpus.empty();
}

NodePlacement place_on(const core::TrainingSpec& training, const NodeOffer& node) {
  NodePlacement p;
  p.gpu = training.device != core::Device::kCpu && !node.gpus.empty();
  if (p.gpu) p.gpus = node.gpus;
  p.workers = core::workers_per_node(training, node.cores, p.gpu ? node.gpus.size() : 0);
  return p;
}

std::optional<Refusal> refuse_placement(const core::TrainingSpec& training,
                                        const std::vector<NodeOffer>& alive) {
  if (training.device != core::Device::kGpu || alive.empty()) return std::nullopt;
  std::vector<std::string> without;
  size_t with = 0;
  for (const NodeOffer& n : alive) {
    if (n.gpus.empty()) without.push_back(n.name);
    else ++with;
  }
  const size_t wanted = training.nodes > 0 ? size_t(training.nodes) : alive.size();
  if (with >= wanted && (training.nodes > 0 || without.empty())) return std::nullopt;
  std::string names;
  for (const std::string& n : without) names += (names.empty() ? "" : ", ") + n;
  Refusal r;
  r.error = "the job asks for training.device: gpu on " +
            (training.nodes > 0 ? std::to_string(wanted) + " nodes" : std::string("every node")) +
            ", but " + std::to_string(with) + " of the " + std::to_string(alive.size()) +
            " registered nodes have a GPU (without: " + names + ")";
  r.fix = with > 0 ? "set training.nodes to at most " + std::to_string(with) +
                         ", or training.device: auto to run the others on their CPUs"
                   : "use training.device: auto or cpu, or start dtraind (a --config=cuda build, "
                     "gpus: all in its dtraind.yaml) on a machine with a GPU";
  return r;
}

}  // namespace dtrain::daemon
