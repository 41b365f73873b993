#pragma once
// `training.mode: auto` (docs/user-guide.md, "Choosing the mode (`mode: auto`)"): dense
// all-reduce or gradient sharing (the latter with `sync: auto`'s own choice of per-step sharing
// or local steps, core/train/sync_choice.h), from what the job's nodes measured before
// training. With the job's batch split over its workers (the default), both take one step of
// the spec's learning rate on the job's batch each step, so the one whose step takes less time
// wins; allreduce on a tie, since its mean is exact and it keeps no residual. Where the nodes
// rehearsed, allreduce's step is rehearsed too (a step of the model and a real ring all-reduce
// of the step's values, every node at once); otherwise it is estimated from the probes: a
// step's compute and the ring's 2 (N - 1) sends of 1/N of the gradient, each half a round trip
// and its bytes at the probed goodput.
#include "core/spec/job_spec.h"
#include "core/train/sync_choice.h"

namespace dtrain::core {

// The ring all-reduce of one step's values (the parameters and GradientRounds' two figures)
// over `in.nodes` at the probed round trip and goodput.
double ring_wait_s(const SyncChoiceInputs& in);
// The rehearsal's ring steps: as many as fill about kRehearsalSeconds at the probes' estimate of
// allreduce's step, within the lock steps' bounds (a model of megabytes rehearses a few: each
// sends 2 (N - 1) / N of its gradient from every node).
int rehearsal_ring_steps(const SyncChoiceInputs& in);
// Whether the job may train allreduce when its nodes choose: `mode: auto`, not fp16 (allreduce
// refuses it), no node-local shards (their minibatches are not dealt out again).
bool may_choose_allreduce(const JobSpec& job);
// For a `mode: auto` job: the mode and, for gradient sharing, the sync; the reason names both
// ways' time a step. For any other job, choose_sync's choice.
SyncChoice choose_training(const TrainingSpec& training, const SyncChoiceInputs& in);

}  // namespace dtrain::core
