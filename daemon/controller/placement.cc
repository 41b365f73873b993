#include "daemon/controller/placement.h"

#include <algorithm>

#include "core/spec/workers_per_node.h"

namespace dtrain::daemon {

NodeDemand demand_of(const core::TrainingSpec& training) {
  if (!training.shares_nodes()) return {};
  NodeDemand d;
  d.whole = false;
  d.gpus = uint32_t(training.gpus_per_node);
  d.cores = uint32_t(training.cores_per_node > 0 ? training.cores_per_node
                                                 : training.gpus_per_node);
  return d;
}

bool node_eligible(const core::TrainingSpec& training, const NodeOffer& node) {
  const NodeDemand d = demand_of(training);
  if (!d.whole) return node.cores >= d.cores && node.gpus.size() >= d.gpus;
  return training.device != core::Device::kGpu || !node.gpus.empty();
}

NodePlacement place_on(const core::TrainingSpec& training, const NodeOffer& node) {
  NodePlacement p;
  const NodeDemand d = demand_of(training);
  if (!d.whole) {
    p.gpu = d.gpus > 0;
    const size_t gpus = std::min<size_t>(d.gpus, node.gpus.size());
    p.gpus.assign(node.gpus.begin(), node.gpus.begin() + long(gpus));
    p.cores = d.cores;
    p.workers = core::workers_per_node(training, d.cores, p.gpus.size());
    return p;
  }
  p.gpu = training.device != core::Device::kCpu && !node.gpus.empty();
  if (p.gpu) p.gpus = node.gpus;
  p.workers = core::workers_per_node(training, node.cores, p.gpu ? node.gpus.size() : 0);
  return p;
}

namespace {

// A share no registered node (or too few) could ever give.
std::optional<Refusal> refuse_share(const core::TrainingSpec& training,
                                    const std::vector<NodeOffer>& alive) {
  size_t with = 0;
  for (const NodeOffer& n : alive) with += node_eligible(training, n) ? 1 : 0;
  const size_t wanted = training.nodes > 0 ? size_t(training.nodes) : 1;
  if (with >= wanted) return std::nullopt;
  const NodeDemand d = demand_of(training);
  Refusal r;
  r.error = "the job asks for " + std::to_string(d.cores) + " cores" +
            (d.gpus > 0 ? " and " + std::to_string(d.gpus) + " GPUs" : std::string()) +
            " on each of " + std::to_string(wanted) + " nodes, but " + std::to_string(with) +
            " of the " + std::to_string(alive.size()) + " registered nodes have that many";
  r.fix = "ask for less (training.cores_per_node, gpus_per_node) or fewer nodes (`dtrain-submit "
          "nodes` lists what each offers)";
  return r;
}

}  // namespace

std::optional<Refusal> refuse_placement(const core::TrainingSpec& training,
                                        const std::vector<NodeOffer>& alive) {
  if (alive.empty()) return std::nullopt;
  if (training.shares_nodes()) return refuse_share(training, alive);
  if (training.device != core::Device::kGpu) return std::nullopt;
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
