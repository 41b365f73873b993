#pragma once
// The corrections that keep sparse, asynchronous training accurate (docs/architecture/core.md,
// "Staleness and corrections"; DGC, Lin et al. 2018; Goyal et al. 2017), as pure functions of the
// spec and the training progress so that each is tested on a hand-computed case. `progress` is in
// epochs (1.5 = half way through the second epoch); `workers` is every worker of the job.
#include <cstdint>

#include "core/codec/message.h"
#include "core/spec/job_spec.h"
#include "kernels/backend.h"

namespace dtrain::core {

// The corrections a worker applies: all of the spec's where the job shares every step. With
// parameter averaging and local steps each worker steps its own replica, so only the spec's
// clip_norm and lr_scaling.warmup_epochs apply (the rate ramps from 1/W to the spec's own,
// factor 1 after); masking and the sparsity warm-up concern per-step messages. Measured: without
// the default clipping and warm-up the LeNet example's local steps diverge in the first epoch.
CorrectionsSpec worker_corrections(const TrainingSpec& training);
// Every correction off: factor 1 on the learning rate, no clipping, masking or warm-up.
CorrectionsSpec corrections_off();

// Factor on each worker's learning rate. The job's step is the sum of every worker's step, so
// factor 1 is linear scaling (the sum is `workers` times one worker's lr), 1/sqrt(W) gives
// sqrt(W) in all and 1/W gives one worker's lr. Warm-up ramps linearly from 1/W to the rule.
double lr_scale(const CorrectionsSpec& c, int workers, double progress);

// Factor on the threshold algorithm's density band during sparsity warm-up: from
// start_density / max_density at progress 0 down to 1 at warmup_epochs, exponentially (DGC's
// 75%, 93.75%, ... sparsity steps, made smooth). 1 when warm-up is off or over.
double density_scale(const CorrectionsSpec& c, double max_density, double progress);

// Local gradient clipping: scales g so that its L2 norm is at most clip_norm / sqrt(workers).
// Returns the factor applied (1 when it was within the bound or clipping is off). g lives in
// `backend`'s memory.
double clip_gradient(const CorrectionsSpec& c, int workers, kernels::Backend& backend, float* g,
                     int64_t n);

// Momentum factor masking: clears momentum[i] for every element i the message sent (host
// memory; a GPU worker's DeviceCodec does the same on the device).
void mask_momentum(const EncodedMessage& m, float* momentum);

}  // namespace dtrain::core
