#pragma once
// The steps of `mode: allreduce` on one node (docs/architecture/core.md, "Dense all-reduce"). Each
// step, every worker of the node arrives with the gradient of its minibatch (or none: its shard
// has no minibatch left while another worker's has). The last to arrive sums them in worker
// order, each weighted by its minibatch's examples (the in-node reduction, through memory), has
// the exchange sum that over the nodes (a ring all-reduce), and divides by the job's examples:
// the gradient of one step on the job's whole batch. Every replica of the job then takes the
// same updater step with it, so the replicas stay identical without any parameter traffic.
//
// Two figures travel with the gradient, summed like it: the step's examples, and the workers
// that still have a minibatch after it. The epoch ends on every node at the same step: the
// first whose count of workers with more is 0.
#include <cstdint>
#include <vector>

#include "core/spec/job_spec.h"
#include "core/train/node_exchange.h"
#include "core/train/node_round.h"
#include "core/train/worker.h"

namespace dtrain::core {

// A step's ring round (NodeExchange::sum_over_nodes): its epoch, counted from 1, above its step
// in that epoch. Ids below 1 << 32 are the rehearsal's, whose ring steps run before a job of
// `mode: auto` chooses (daemon/node/sync_rehearsal.h): every training round comes after them,
// as a ring's rounds must increase.
inline int64_t step_round_id(int64_t epoch, int64_t step_in_epoch) {
  return ((epoch + 1) << 32) + step_in_epoch;
}
// The epoch of a step's round id, and its step in it; epoch -1 for a rehearsal's.
inline int64_t epoch_of_round_id(int64_t round) { return (round >> 32) - 1; }
inline int64_t step_of_round_id(int64_t round) { return round & 0xffffffff; }

// A step's sum over the nodes holds the gradient's values, then these figures: the step's
// examples and its workers with a minibatch after it.
constexpr int64_t kStepFigures = 2;
inline int64_t step_sum_values(int64_t num_params) { return num_params + kStepFigures; }

class GradientRounds {
 public:
  // `exchange`: null without a cluster (--local: this node's workers are the whole job).
  GradientRounds(int workers, int64_t num_params, const CorrectionsSpec& corrections,
                 NodeExchange* exchange);

  // A new epoch: every worker takes part in its first step.
  void start_epoch() { more_ = true; }
  // Whether the job has a step left in this epoch (as of the last step).
  bool more() const { return more_; }

  // Worker `w`'s part of step `round` (ids increasing over the job, the same on every node):
  // `worker`'s gradient (null: no minibatch this step) and whether it has a minibatch after
  // this one. Returns false when `stopped` turned true before the step ran. When the sum over
  // the nodes throws, the worker that ran it gets the exception and the others a step of no
  // examples and no more steps.
  template <class Stopped>
  bool arrive(int w, Worker* worker, bool has_more, int64_t round, Stopped stopped);

  // The step's result, valid until the next step starts: the job's mean gradient (clipped at
  // the spec's clip_norm), and the examples it is the mean of (0: no worker had a minibatch).
  const float* mean() const { return mean_.data(); }
  double examples() const { return examples_; }

 private:
  // The last worker's part: the node's weighted sum, the exchange's sum, the mean.
  void run_step(int64_t round);

  const int workers_;
  const int64_t n_;
  const CorrectionsSpec corrections_;
  NodeExchange* const exchange_;
  NodeRound round_;
  struct Part {
    const float* gradient = nullptr;  // host memory, null: no minibatch
    std::vector<float> scratch;       // a GPU worker's gradient, copied to the host
    double examples = 0.0;
    bool has_more = false;
  };
  std::vector<Part> parts_;
  std::vector<float> sum_;  // n gradient sums, then the examples, then the workers with more
  std::vector<float> mean_;
  double examples_ = 0.0;
  bool more_ = true;
};

template <class Stopped>
bool GradientRounds::arrive(int w, Worker* worker, bool has_more, int64_t round,
                            Stopped stopped) {
  Part& part = parts_[size_t(w)];
  part.gradient = worker ? worker->host_gradient(part.scratch) : nullptr;
  part.examples = worker ? double(worker->last_batch_size()) : 0.0;
  part.has_more = has_more;
  auto run = [this, round] { run_step(round); };
  if (workers_ == 1) {
    run();
    return true;
  }
  return round_.arrive(run, stopped);
}

}  // namespace dtrain::core
