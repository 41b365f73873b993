#pragma once
// At an epoch end the survivors of a lost node do its minibatches that are left in the epoch
// (docs/architecture/core.md, "Sharing"): the same list on every node
// (NodeExchange::EpochEnd::takeover), dealt round-robin over the live workers of the job.
#include <atomic>
#include <cstdint>
#include <vector>

#include "core/train/batch_split.h"
#include "core/train/node_exchange.h"
#include "core/train/sharing_worker.h"
#include "core/train/step_gate.h"

namespace dtrain::core {

// Gradient sharing: this node's workers do their deal of `end.takeover`, each on its thread.
// Returns how many minibatches this node did.
int64_t take_over(const NodeExchange::EpochEnd& end, int64_t epoch, int shards,
                  const WorkerBatch& batching, StepGate& gate, SharingWorkers& workers,
                  std::vector<int64_t>& iterations, const std::atomic<bool>* cancel);

// Parameter averaging and allreduce: this node's share of the minibatches of lost members and
// vacant slots (dealt round-robin over the live workers as in gradient sharing; the node's
// `node_workers` shares), all applied by `worker` to its replica; the takeover round that follows
// averages them in.
int64_t average_take_over(const NodeExchange::EpochEnd& end, int shards,
                          const WorkerBatch& batching, Worker& worker, int node_workers,
                          int64_t& iteration, const std::atomic<bool>* cancel);

// Node-local data: what is left of a lost node's minibatches this epoch, which no survivor can
// do (its files are not on them). The same count on every node.
int64_t undone_batches(const NodeExchange::EpochEnd& end, const StepGate& gate);

}  // namespace dtrain::core
