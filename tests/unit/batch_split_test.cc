// The job's batch split over its workers (core/train/batch_split.h) against small cases computed
// by hand: the per-worker batch, the learning rate and clipping each worker runs with, and where
// the schedule is.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "core/train/batch_split.h"
#include "core/train/corrections.h"
#include "kernels/backend.h"

using namespace dtrain::core;

namespace {

JobSpec split_job(int64_t batch) {
  JobSpec job;
  job.training.batch_size = batch;
  job.training.batch_size_per_worker = 0;
  return job;
}

}  // namespace

TEST_CASE("a split batch gives each worker B/W examples, rounded, at least one") {
  JobSpec job = split_job(64);
  WorkerBatch b = worker_batch(job.training, 1);
  CHECK(b.split);
  CHECK(b.per_worker == 64);
  CHECK(b.per_step == 64);
  b = worker_batch(job.training, 9);  // 64 / 9 = 7.1
  CHECK(b.per_worker == 7);
  CHECK(b.per_step == 63);
  b = worker_batch(job.training, 6);  // 10.67 rounds up
  CHECK(b.per_worker == 11);
  CHECK(b.per_step == 66);
  b = worker_batch(job.training, 100);  // fewer examples than workers: one each
  CHECK(b.per_worker == 1);
  CHECK(b.per_step == 100);
  CHECK(describe_batch(job.training, 9) == "batch 64 over 9 workers (7 each, 63 a step)");
  CHECK(describe_batch(job.training, 4) == "batch 64 over 4 workers (16 each)");
  CHECK(describe_batch(job.training, 1) == "batch 64");
}

TEST_CASE("a batch per worker is each worker's, and a step grows with the workers") {
  JobSpec job;
  job.training.batch_size = 0;
  job.training.batch_size_per_worker = 64;
  const WorkerBatch b = worker_batch(job.training, 9);
  CHECK_FALSE(b.split);
  CHECK(b.per_worker == 64);
  CHECK(b.per_step == 576);
  const JobSpec w = per_worker_spec(job, 9);
  CHECK(w.training.batch_size_per_worker == 64);
  CHECK(w.training.corrections.lr_scaling == job.training.corrections.lr_scaling);
  CHECK(w.training.corrections.clip_norm == job.training.corrections.clip_norm);
  CHECK(describe_batch(job.training, 9) == "batch 64 per worker");
}

TEST_CASE("split: W workers' summed steps are one step of lr on the job's batch, clipped at C") {
  JobSpec job = split_job(64);
  job.training.corrections.clip_norm = 5.0;
  job.training.corrections.lr_warmup_epochs = 1.0;
  const JobSpec w = per_worker_spec(job, 9);
  CHECK(w.training.batch_size_per_worker == 7);
  // Each worker steps lr / 9 on its mean gradient: the sum is lr times the mean over 63
  // examples, from the first step (no warm-up: the step is the job's batch already).
  CHECK(lr_scale(w.training.corrections, 9, 0.0) == Approx(1.0 / 9.0));
  CHECK(lr_scale(w.training.corrections, 9, 3.0) == Approx(1.0 / 9.0));
  // The job's gradient is the mean of 9 worker gradients; bounding it at 5 bounds each
  // worker's at 5 * sqrt(9) = 15. A worker gradient (12, 16) of norm 20 is scaled by 0.75.
  std::vector<float> g = {12.0f, 16.0f};
  CHECK(clip_gradient(w.training.corrections, 9, dtrain::kernels::cpu_backend(), g.data(), 2) ==
        Approx(0.75));
  CHECK(g[0] == Approx(9.0f));
  CHECK(g[1] == Approx(12.0f));
  // One worker: nothing changes but the batch.
  const JobSpec one = per_worker_spec(job, 1);
  CHECK(one.training.batch_size_per_worker == 64);
  CHECK(lr_scale(one.training.corrections, 1, 0.0) == 1.0);
  CHECK(one.training.corrections.clip_norm == 5.0);
  // Parameter averaging keeps the learning rate: each worker is a whole SGD of its own.
  job.training.mode = dtrain::core::TrainingMode::kParameterAveraging;
  CHECK(per_worker_spec(job, 9).training.corrections.clip_norm == 5.0);
  CHECK(per_worker_spec(job, 9).training.batch_size_per_worker == 7);
}

TEST_CASE("the schedule follows the job's steps: one per round when split, one per worker step else") {
  JobSpec job = split_job(64);
  const WorkerBatch split = worker_batch(job.training, 9);
  CHECK(schedule_iteration(split, 10, 9, 4) == 10);  // round 10 of the job, for every worker
  job.training.batch_size = 0;
  job.training.batch_size_per_worker = 64;
  const WorkerBatch per = worker_batch(job.training, 9);
  CHECK(schedule_iteration(per, 10, 9, 4) == 94);  // 10 rounds of 9 steps, then worker 4's
}
