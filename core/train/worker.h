#pragma once
// One training worker: its own model replica, updater, data shard and random stream. Each step
// computes the update u for the next minibatch (docs/architecture/core.md, "The update", step 1);
// who applies u, and how it is shared, is the trainer's business.
#include <algorithm>
#include <limits>
#include <memory>
#include <vector>

#include "core/data/minibatch_iterator.h"
#include "core/model/model.h"
#include "core/train/loss_scaler.h"
#include "core/spec/job_spec.h"
#include "core/updaters/updater.h"

namespace dtrain::core {

// The part of the training examples a worker's minibatches come from: shard `index` of
// `count`. count 0: the worker's own place among the job's workers (every node reads the whole
// data); node-local data gives each worker its part of its node's examples instead.
struct DataShard {
  int64_t index = 0, count = 0;
};

class Worker {
 public:
  // Worker `shard` of the job's `num_shards`, its minibatches from `data` of `train` (default:
  // shard `shard` of `num_shards`); parameters copied from `initial` (a host model). The worker
  // computes on `backend` (default: the process's, the CPU): a GPU worker's model, gradients,
  // step and updater state live on its GPU.
  Worker(const JobSpec& job, const ExampleSource& train, const Model& initial, int64_t shard,
         int64_t num_shards, kernels::Backend* backend = nullptr, DataShard data = {});

  void start_epoch(int64_t epoch) { iterator_.start_epoch(epoch); }
  // Passes over the epoch's next `batches` minibatches (resuming mid-epoch from a checkpoint).
  void skip_batches(int64_t batches) { iterator_.skip(batches); }
  // Computes u for the next minibatch into step(); false at the end of the epoch.
  // own_iteration counts this worker's steps (0-based); the learning-rate schedule is evaluated
  // at schedule_iteration (the node's minibatch count; the same when there is one worker).
  bool compute_step(int64_t own_iteration, int64_t schedule_iteration);
  // The same on minibatch `batch` of another shard of this epoch (taking over a lost node's
  // data); false if that shard has no such minibatch.
  bool compute_step_on(int64_t shard, int64_t num_shards, int64_t batch, int64_t own_iteration,
                       int64_t schedule_iteration);
  int64_t batches_in_shard(int64_t shard, int64_t num_shards) const {
    return iterator_.batches_in_shard(shard, num_shards);
  }

  // params -= u
  void apply_own_step();

  // Dense all-reduce (docs/architecture/core.md, "Dense all-reduce"): the next minibatch's
  // gradient into model().grads() and nothing more (no clipping, no updater); false at the end of
  // the epoch. host_gradient() is that gradient in host memory (a GPU worker's copied into
  // `scratch`); apply_gradient() takes the job's gradient (host memory, already clipped) through
  // the updater, at updater step `t` (1-based, the same on every replica), and applies it.
  bool compute_gradient(int64_t own_iteration);
  // What compute_gradient tells as its backward pass finishes parts of the gradient
  // (Model::GradientsReady; empty: nothing).
  void set_gradients_ready(Model::GradientsReady ready) { ready_ = std::move(ready); }
  const float* host_gradient(std::vector<float>& scratch);
  void apply_gradient(const float* host_gradient, int64_t schedule_iteration, int64_t t);

  Model& model() { return *model_; }
  kernels::Backend& backend() { return model_->backend(); }
  Updater& updater() { return *updater_; }
  const float* step() const { return step_.data(); }
  float* mutable_step() { return step_.data(); }
  double last_loss() const { return last_loss_; }
  // Milliseconds the last compute_step or compute_step_on waited for its minibatch (reading,
  // decoding, augmenting: part of its time).
  double last_data_ms() const { return last_data_ms_; }
  int64_t last_batch_size() const { return last_batch_; }
  int64_t batches_per_epoch() const { return iterator_.batches_per_epoch(); }
  int64_t examples_per_epoch() const { return iterator_.examples_per_epoch(); }
  // Epochs of this worker's shard done so far, from its own step count (the corrections'
  // warm-ups follow it).
  double progress(int64_t own_iteration) const {
    return double(own_iteration) / double(std::max<int64_t>(1, batches_per_epoch()));
  }
  int workers() const { return workers_; }
  // fp16 on a GPU: the loss scaler (nullptr otherwise), for its scale and skipped steps.
  const LossScaler* loss_scaler() const { return scaler_.get(); }
  // Replaces the scaler's state (tests; a worker without fp16 ignores it).
  void set_loss_scaler(const LossScaler& scaler) {
    if (scaler_) *scaler_ = scaler;
  }

 private:
  // Loads a minibatch into x_, y_ with `load`, timing it into last_data_ms_; false if none.
  template <typename Load>
  bool timed_load(Load load);
  void compute_loaded(int64_t own_iteration, int64_t schedule_iteration);  // on x_, y_
  bool skipped_for_overflow(int64_t own_iteration);
  void check_finite_loss(int64_t own_iteration) const;  // throws UserError when it is not

  CorrectionsSpec corrections_;
  int workers_;  // in the whole job (corrections scale with it)
  std::unique_ptr<Model> model_;
  std::unique_ptr<Updater> updater_;
  MinibatchIterator iterator_;
  Rng rng_;
  std::unique_ptr<LossScaler> scaler_;
  double last_finite_loss_ = std::numeric_limits<double>::quiet_NaN();  // fp16: see .cc
  Tensor x_, y_, step_;
  Model::GradientsReady ready_;
  double last_loss_ = 0.0;
  double last_data_ms_ = 0.0;
  int64_t last_batch_ = 0;
};

}  // namespace dtrain::core
