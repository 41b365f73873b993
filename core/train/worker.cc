#include "core/train/worker.h"

#include <chrono>
#include <cmath>
#include <cstring>

#include "core/train/corrections.h"
#include "core/util/error.h"

namespace dtrain::core {

Worker::Worker(const JobSpec& job, const ExampleSource& train, const Model& initial, int64_t shard,
               int64_t num_shards, kernels::Backend* backend, DataShard data)
    : corrections_(worker_corrections(job.training)),
      workers_(static_cast<int>(num_shards)),
      model_(std::make_unique<Model>(job.model, backend)),
      iterator_(train, job.training.batch_size_per_worker, job.seed,
                data.count > 0 ? data.index : shard, data.count > 0 ? data.count : num_shards,
                job.data.augment),
      rng_(Rng::derive(job.seed, 0xd0d0ULL + static_cast<uint64_t>(shard))) {
  model_->set_params(initial.host_params());
  model_->set_state(initial.host_state());
  updater_ = Updater::create(job.model.updater, job.model.l2, model_->segments(),
                             model_->num_params(), &model_->backend());
  if (!model_->on_host()) step_.set_memory(&model_->backend());
  step_.resize({model_->num_params()});
  // Mixed precision is a GPU worker's (its backend computes in it); fp16 needs loss scaling.
  if (job.training.precision == kernels::Precision::kFp16 && !model_->on_host())
    scaler_ = std::make_unique<LossScaler>();
}

template <typename Load>
bool Worker::timed_load(Load load) {
  const auto start = std::chrono::steady_clock::now();
  const bool loaded = load();
  last_data_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return loaded;
}

bool Worker::compute_step(int64_t own_iteration, int64_t schedule_iteration) {
  if (!timed_load([&] { return iterator_.next(x_, y_); })) return false;
  compute_loaded(own_iteration, schedule_iteration);
  return true;
}

bool Worker::compute_step_on(int64_t shard, int64_t num_shards, int64_t batch,
                             int64_t own_iteration, int64_t schedule_iteration) {
  if (!timed_load([&] { return iterator_.batch_of_shard(shard, num_shards, batch, x_, y_); }))
    return false;
  compute_loaded(own_iteration, schedule_iteration);
  return true;
}

void Worker::compute_loaded(int64_t own_iteration, int64_t schedule_iteration) {
  last_batch_ = x_.dim(0);
  last_loss_ = model_->compute_gradients(x_, y_, rng_, scaler_ ? scaler_->scale() : 1.f);
  if (scaler_ && skipped_for_overflow(own_iteration)) return;
  check_finite_loss(own_iteration);
  clip_gradient(corrections_, workers_, model_->backend(), model_->grads(), model_->num_params());
  // Adam's bias correction counts the updates the updater made: fp16 steps skipped for
  // overflow made none.
  const int64_t updates = own_iteration + 1 - (scaler_ ? scaler_->skipped() : 0);
  updater_->compute_step(model_->params(), model_->grads(), step_.data(), schedule_iteration,
                         updates, lr_scale(corrections_, workers_, progress(own_iteration)));
}

void Worker::check_finite_loss(int64_t own_iteration) const {
  if (!std::isfinite(last_loss_))
    throw UserError("training diverged: the loss became " + std::to_string(last_loss_) +
                        " at iteration " + std::to_string(own_iteration),
                    "lower model.updater.learning_rate or normalise the data "
                    "(data.normalize: scale)");
}

bool Worker::compute_gradient(int64_t own_iteration) {
  if (!timed_load([&] { return iterator_.next(x_, y_); })) return false;
  last_batch_ = x_.dim(0);
  last_loss_ = model_->compute_gradients(x_, y_, rng_, 1.f, ready_ ? &ready_ : nullptr);
  check_finite_loss(own_iteration);
  return true;
}

const float* Worker::host_gradient(std::vector<float>& scratch) {
  if (model_->on_host()) return model_->grads();
  scratch.resize(size_t(model_->num_params()));
  model_->backend().download(scratch.data(), model_->grads(), model_->num_params());
  return scratch.data();
}

void Worker::apply_gradient(const float* host_gradient, int64_t schedule_iteration, int64_t t) {
  const float* grad = host_gradient;
  if (!model_->on_host()) {
    model_->backend().upload(model_->grads(), host_gradient, model_->num_params());
    grad = model_->grads();
  }
  updater_->compute_step(model_->params(), grad, step_.data(), schedule_iteration, t);
  apply_own_step();
}

// fp16: the loss or a gradient overflowed at this scale. The step gives no update (the residual
// still goes out: the encoder sees a zero step) and the updater's state does not move; the
// scaler halves the scale for the next one.
bool Worker::skipped_for_overflow(int64_t own_iteration) {
  const bool finite = std::isfinite(last_loss_) &&
                      std::isfinite(model_->backend().sum_squares(model_->grads(),
                                                                  model_->num_params()));
  if (scaler_->step_finite(finite)) {
    last_finite_loss_ = last_loss_;
    return false;
  }
  // The loss shown and averaged is the last one known (none before the first good step).
  if (!std::isfinite(last_loss_)) last_loss_ = last_finite_loss_;
  if (scaler_->hopeless())
    throw UserError("training.precision fp16 overflows at every step even without loss "
                        "scaling (the last " + std::to_string(LossScaler::kGiveUpAfter) +
                        " steps up to iteration " + std::to_string(own_iteration) +
                        "): an activation or gradient is past fp16's 65504",
                    "use training.precision bf16 (fp32's range), or fp32");
  model_->backend().fill(step_.data(), model_->num_params(), 0.f);
  return true;
}

void Worker::apply_own_step() {
  model_->backend().axpy(-1.0f, step_.data(), model_->params(), model_->num_params());
}

}  // namespace dtrain::core
