#pragma once
// What a training run settles before its first step: whether the job fits this node's memory,
// the GPU backends of its workers, and every worker's minibatches per epoch (the step gate's
// counts).
#include "kernels/precision.h"
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/spec/job_spec.h"
#include "core/train/training_types.h"
#include "kernels/backend.h"

namespace dtrain::core {

// The job's parameter cap on this node: its workers' parameter-sized buffers must fit the host's
// memory, or each GPU's (core/train/memory_budget). Throws UserError when they do not.
void check_memory(const JobSpec& job, int64_t params, int workers, const std::vector<int>& gpus);

// One backend per GPU worker (each its own stream), or none for CPU workers. Throws UserError
// when a GPU cannot be used, with the driver's reason.
std::vector<std::unique_ptr<kernels::Backend>> make_gpu_backends(const std::vector<int>& gpus,
                                                                 int workers,
                                                                 kernels::Precision precision);

// Minibatches per epoch of each of the job's workers, all reading one data set.
std::vector<int64_t> even_shard_batches(int64_t examples, int64_t batch, int shards);

// Node-local data: each worker's minibatches come from its own node's examples (`examples`
// here, which must be what the plan says, or the gate's counts for this node's workers would
// not be what their iterators make). Throws UserError when they differ.
std::vector<int64_t> local_shard_batches(const NodeLocalData& plan, int64_t examples,
                                         int64_t batch, int shards);

}  // namespace dtrain::core
