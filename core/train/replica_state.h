#pragma once
// A node's replicas as files and as averages: the snapshot a model file or checkpoint holds,
// the best model early stopping keeps, and what the epoch end averages over the workers
// (thresholds and batch-norm statistics, which no update carries).
#include <cstdint>
#include <vector>

#include "core/io/model_file.h"
#include "core/spec/job_spec.h"
#include "core/train/node_exchange.h"
#include "core/train/sharing_worker.h"
#include "core/train/training_data.h"

namespace dtrain::core {

// The model file of `worker`'s replica at `iteration` of `epoch`. `encoder`: the worker's
// gradient-sharing state, for checkpoints (null: the model alone).
ModelFile snapshot(const JobSpec& job, Worker& worker, const TrainingData& data,
                   int64_t iteration, int64_t epoch, const UpdateEncoder* encoder = nullptr);

// A checkpoint: the lead worker's snapshot and every other worker's residual, step count and
// updater state.
ModelFile checkpoint(const JobSpec& job, SharingWorkers& workers, const TrainingData& data,
                     int64_t iteration, int64_t epoch, bool sharing);

// A model's parameters and batch-norm statistics on the host (the best one, for early
// stopping).
struct Replica {
  std::vector<float> params, state;
};
Replica copy_replica(Model& m);
void restore_replica(Model& m, const Replica& r);

// Batch-norm running statistics are not parameters, so no message carries them: each replica
// keeps its own and they are averaged at epoch ends (the evaluated and saved model use the mean):
// over the process's workers (average_state), and in a cluster over every live node's at the
// exchange's second barrier (this node's state_sum goes out, the mean comes back to set_state).
NodeExchange::StateSum state_sum(SharingWorkers& workers);
void set_state(SharingWorkers& workers, const std::vector<float>& mean);
void average_state(SharingWorkers& workers);

// docs/architecture/core.md, "The update": thresholds are per worker and averaged at each epoch
// end.
void average_tau(SharingWorkers& workers);

}  // namespace dtrain::core
