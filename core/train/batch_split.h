#pragma once
// How a job's minibatch is divided among its workers (docs/architecture/core.md, "Batch size").
//
// `training.batch_size: B` (the default, 32) is the job's batch: each of the W workers takes
// B / W examples a step and the sum of their steps is one step on B examples, so adding workers
// changes neither the number of steps in an epoch nor, to float and sparsity rounding, the model.
// `training.batch_size_per_worker: b` is the other choice: each worker takes b, a step covers
// W * b examples, and the corrections (linear learning-rate scaling with warm-up, clipping)
// try to make up for the W times fewer steps.
#include <cstdint>
#include <string>

#include "core/spec/job_spec.h"

namespace dtrain::core {

struct WorkerBatch {
  int64_t per_worker = 0;  // examples each worker takes a step
  int64_t per_step = 0;    // examples one step of the job covers (W * per_worker)
  bool split = false;      // true: the job's batch_size divided among the workers
};

// The division for `workers` workers in the whole job (>= 1). A split batch rounds B / W to
// the nearest whole example, at least one.
WorkerBatch worker_batch(const TrainingSpec& t, int workers);

// The spec each worker of a `workers`-worker job runs: batch_size_per_worker resolved. For a
// split batch under gradient sharing, also the corrections that make the sum of the W workers'
// steps one step on the job's batch: each worker's learning rate is 1/W of the spec's (no
// warm-up: every step is already the job's batch) and clipping bounds the job's gradient, the
// mean of W worker gradients, at clip_norm (each worker's at clip_norm * sqrt(W)).
JobSpec per_worker_spec(const JobSpec& job, int workers);

// The learning-rate schedule's iteration for step `own_step` of worker `index` (of `workers` in
// the job): schedules follow steps on one job-sized batch, so they reach the same point after an
// epoch whatever the number of workers. With a split batch every worker's step is one such step;
// with a batch per worker each worker's step counts.
int64_t schedule_iteration(const WorkerBatch& b, int64_t own_step, int workers, int index);

// "batch 64 over 9 workers (7 each)" or "batch 64 per worker": for logs and progress lines.
std::string describe_batch(const TrainingSpec& t, int workers);

}  // namespace dtrain::core
