#pragma once
// How long one worker's training step computes, measured before a job starts (for
// `training.sync: auto`, core/train/sync_choice.h): a forward and backward pass of the job's
// model on a minibatch of its per-worker size, on random inputs, on this machine's CPU.
#include "core/model/model.h"
#include "core/spec/job_spec.h"
#include "core/util/rng.h"

namespace dtrain::core {

// One worker's training step of the job's model on random inputs of its per-worker batch:
// what time_training_step times, and what a node computes while it rehearses
// (daemon/node/sync_rehearsal.h).
class StepComputer {
 public:
  StepComputer(const JobSpec& job, int workers);
  double step();  // a forward and backward pass; its seconds
  int64_t num_params() const { return model_.num_params(); }

 private:
  Model model_;
  Rng rng_;
  Tensor x_, y_;
};

struct StepTiming {
  double seconds = 0.0;  // the fastest of a few passes after a warm-up one
  int64_t num_params = 0;
  // A round's message of local steps with the spec's levels and density
  // (core/train/sync_choice.h, pseudo_gradient_round_bytes).
  double round_bytes = 0.0;
  // A round of local steps' own work in one process: the threshold, the levels' encoding, their
  // decoding and the outer step, on a normal pseudo-gradient of the model's size (the faster of
  // two rounds). These work figures are timed on at most kRoundSample elements and scaled.
  double round_work_s = 0.0;
  // Decoding one more node's part of that round (its levels, then into the sum).
  double part_decode_s = 0.0;
  // Per-step sharing's own work a step in one process: one worker's update encoded at the
  // threshold's density (core/train/sync_choice.h, per_step_density) and the job's other
  // workers' messages of that size applied (the faster of two steps).
  double step_work_s = 0.0;
};
StepTiming time_training_step(const JobSpec& job, int workers);

}  // namespace dtrain::core
