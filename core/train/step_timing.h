#pragma once
// How long one worker's training step computes, measured before a job starts (for
// `training.sync: auto`, core/train/sync_choice.h): a forward and backward pass of the job's
// model on a minibatch of its per-worker size, on random inputs, on this machine's CPU.
#include "core/spec/job_spec.h"

namespace dtrain::core {

struct StepTiming {
  double seconds = 0.0;  // the fastest of a few passes after a warm-up one
  int64_t num_params = 0;
  // A round's message of local steps with the spec's levels and density, the step's gradient
  // standing for the pseudo-gradient (core/train/sync_choice.h, round_message_bytes).
  double round_bytes = 0.0;
};
StepTiming time_training_step(const JobSpec& job, int workers);

}  // namespace dtrain::core
