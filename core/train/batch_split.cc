#include "core/train/batch_split.h"

#include <algorithm>

namespace dtrain::core {

WorkerBatch worker_batch(const TrainingSpec& t, int workers) {
  const int64_t w = std::max(1, workers);
  WorkerBatch b;
  b.split = t.batch_size > 0;
  b.per_worker =
      b.split ? std::max<int64_t>(1, (t.batch_size + w / 2) / w) : t.batch_size_per_worker;
  b.per_step = b.per_worker * w;
  return b;
}

JobSpec per_worker_spec(const JobSpec& job, int workers) {
  JobSpec s = job;
  const WorkerBatch b = worker_batch(job.training, workers);
  s.training.batch_size_per_worker = b.per_worker;
  if (b.split && shares_every_step(job.training)) {
    CorrectionsSpec& c = s.training.corrections;
    c.lr_scaling = "none";
    c.lr_warmup_epochs = 0.0;
    // clip_gradient bounds each worker at clip_norm / sqrt(W); times W gives clip_norm * sqrt(W).
    c.clip_norm *= std::max(1, workers);
  }
  return s;
}

int64_t schedule_iteration(const WorkerBatch& b, int64_t own_step, int workers, int index) {
  return b.split ? own_step : own_step * workers + index;
}

std::string describe_batch(const TrainingSpec& t, int workers) {
  const WorkerBatch b = worker_batch(t, workers);
  if (!b.split) return "batch " + std::to_string(b.per_worker) + " per worker";
  std::string text = "batch " + std::to_string(t.batch_size);
  if (workers <= 1) return text;
  text += " over " + std::to_string(workers) + " workers (" + std::to_string(b.per_worker) +
          " each";
  if (b.per_step != t.batch_size) text += ", " + std::to_string(b.per_step) + " a step";
  return text + ")";
}

}  // namespace dtrain::core
