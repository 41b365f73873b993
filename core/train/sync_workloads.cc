#include "core/train/sync_workloads.h"

#include <algorithm>
#include <cmath>

#include "core/train/sync_choice.h"
#include "core/util/rng.h"

namespace dtrain::core {
namespace {

// n draws of normal(0, stddev) from the job's seed.
std::vector<float> normals(const JobSpec& job, int64_t n, float stddev) {
  Rng rng(job.seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = rng.normal(0.f, stddev);
  return v;
}

}  // namespace

LocalRoundWork::LocalRoundWork(const JobSpec& job, int64_t n)
    : global_(static_cast<size_t>(n), 0.f),
      replica_(normals(job, n, 1e-3f)),
      local_(job.training, CodecEngine::get(), global_.data(), n, 0) {}

PartDecodeWork::PartDecodeWork(const JobSpec& job, int64_t n)
    : engine_(CodecEngine::get()), negated_(static_cast<size_t>(n)), sum_(static_cast<size_t>(n)) {
  const std::vector<float> update = normals(job, n, 1.f);
  std::vector<float> residual(static_cast<size_t>(n), 0.f);
  const float tau = LocalSteps::threshold_for(update, 0.25);
  CodecEngine::Scratch scratch;
  double sum_squares = 0.0;
  const EncodedMessage level =
      engine_.encode_segment(residual.data(), update.data(), n, tau, 0.f, &sum_squares, scratch);
  part_ = {1, std::vector<EncodedMessage>(size_t(job.training.sync.local.levels), level)};
}

SharingStepWork::SharingStepWork(const JobSpec& job, int64_t n, int others)
    : engine_(CodecEngine::get()),
      update_(normals(job, n, 1e-3f)),
      tau_(LocalSteps::threshold_for(update_, per_step_density(job.training.threshold))),
      others_(others),
      residual_(static_cast<size_t>(n), 0.f),
      params_(static_cast<size_t>(n), 0.f) {}

void SharingStepWork::run() {
  double sum_squares = 0.0;
  const EncodedMessage m = engine_.encode_segment(residual_.data(), update_.data(),
                                                  int64_t(update_.size()), tau_, 5 * tau_,
                                                  &sum_squares, scratch_);
  for (int k = 0; k < others_; ++k) engine_.apply(m, params_.data());
}

namespace {

int64_t sample_of(const StepComputer& c) { return std::min(c.num_params(), kRoundSample); }

// How many times the codec's work on the sample makes the model's.
int repeats_of(const StepComputer& c) {
  const double times = double(c.num_params()) / double(std::max<int64_t>(1, sample_of(c)));
  return std::max(1, int(std::lround(times)));
}

}  // namespace

RehearsalWork::RehearsalWork(const JobSpec& job, int workers, int nodes)
    : computer_(job, workers),
      repeats_(repeats_of(computer_)),
      nodes_(nodes),
      sharing_(job, sample_of(computer_), workers - 1),
      local_(job, sample_of(computer_)),
      part_(job, sample_of(computer_)) {
  // Once untimed: a round's first run pays for its buffers (the MLP's: 28-42 ms against 7-10
  // for the next), which training pays once, not every round.
  step();
  share_step();
  round();
}

void RehearsalWork::share_step() {
  for (int r = 0; r < repeats_; ++r) {
    sharing_.prepare();
    sharing_.run();
  }
}

void RehearsalWork::round() {
  for (int r = 0; r < repeats_; ++r) {
    local_.prepare();
    local_.run(rounds_++);
    for (int k = 1; k < nodes_; ++k) part_.run();
  }
}

}  // namespace dtrain::core
