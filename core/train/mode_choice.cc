#include "core/train/mode_choice.h"

#include <cstdio>

#include "core/train/gradient_rounds.h"

namespace dtrain::core {
namespace {

// Allreduce's time a step: rehearsed, or a step's compute and the ring's wait from the probes.
double allreduce_step_s(const SyncChoiceInputs& in, std::string& how) {
  char text[160];
  if (in.rehearsal && in.rehearsal->ring_step_s > 0) {
    std::snprintf(text, sizeof text, "rehearsed over %d ring steps", in.rehearsal->ring_steps);
    how = text;
    return in.rehearsal->ring_step_s;
  }
  const double ring = ring_wait_s(in);
  std::snprintf(text, sizeof text, "a step's compute and a ring of %d nodes waiting %.2f ms",
                in.nodes, ring * 1e3);
  how = text;
  return in.step_s + ring;
}

std::string allreduce_figures(double allreduce_s, const std::string& how, double sharing_s) {
  char text[256];
  std::snprintf(text, sizeof text,
                "; allreduce takes %.2f ms a step (%s), gradient sharing as chosen %.2f ms",
                allreduce_s * 1e3, how.c_str(), sharing_s * 1e3);
  return text;
}

}  // namespace

bool may_choose_allreduce(const JobSpec& job) {
  return mode_is_auto(job.training) && job.training.precision != kernels::Precision::kFp16 &&
         job.data.train.shards.empty();
}

double ring_wait_s(const SyncChoiceInputs& in) {
  if (in.nodes <= 1 || in.link.goodput_bytes_s <= 0) return 0.0;
  const double segment = 4.0 * double(step_sum_values(in.num_params)) / double(in.nodes);
  return 2.0 * double(in.nodes - 1) * (in.link.rtt_s / 2 + segment / in.link.goodput_bytes_s);
}

int rehearsal_ring_steps(const SyncChoiceInputs& in) {
  return rehearsal_steps_for(in.step_s + ring_wait_s(in));
}

SyncChoice choose_training(const TrainingSpec& training, const SyncChoiceInputs& in) {
  SyncChoice sharing = choose_sync(training, in);
  if (!mode_is_auto(training)) return sharing;
  if (training.precision == kernels::Precision::kFp16) {
    sharing.reason = "precision fp16, which allreduce refuses: gradient sharing; " + sharing.reason;
    return sharing;
  }
  if (in.nodes <= 1 || sharing.step_s <= 0) {
    sharing.reason += "; nothing to weigh allreduce against: gradient sharing";
    return sharing;
  }
  std::string how;
  const double allreduce_s = allreduce_step_s(in, how);
  const std::string weighed = sharing.reason + allreduce_figures(allreduce_s, how, sharing.step_s);
  if (allreduce_s <= sharing.step_s)
    return SyncChoice{0, weighed + ": allreduce", true, allreduce_s};
  sharing.reason = weighed + ": gradient sharing";
  return sharing;
}

}  // namespace dtrain::core
