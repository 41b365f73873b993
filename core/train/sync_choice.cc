#include "core/train/sync_choice.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace dtrain::core {
namespace {

// A sparse element on the wire: 31 bits of index and a sign (docs/architecture/core.md).
constexpr double kBytesPerElement = 4.0;

std::string figures(const SyncChoiceInputs& in) {
  char text[160];
  std::snprintf(text, sizeof text, "RTT %.2f ms, %.1f MB/s, a step computes %.2f ms",
                in.link.rtt_s * 1e3, in.link.goodput_bytes_s / 1e6, in.step_s * 1e3);
  return text;
}

// What one node waits for each step under bsp: the others' messages of the step before, sent
// about half a round trip ago, at the densest the threshold band allows.
double per_step_wait_s(const TrainingSpec& t, const SyncChoiceInputs& in) {
  const double others = double(in.workers) * double(in.nodes - 1) / double(in.nodes);
  const double bytes =
      others * kBytesPerElement * double(in.num_params) * t.threshold.max_sparsity;
  return in.link.rtt_s / 2 + bytes / in.link.goodput_bytes_s;
}

// A round of local steps: every other node's levels of the pseudo-gradient, and a round trip.
double round_wait_s(const TrainingSpec& t, const SyncChoiceInputs& in) {
  const LocalStepsSpec& l = t.sync.local;
  const double bytes = double(in.nodes - 1) * double(l.levels) * kBytesPerElement *
                       double(in.num_params) * l.density;
  return in.link.rtt_s + bytes / in.link.goodput_bytes_s;
}

std::string milliseconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f ms", s * 1e3);
  return text;
}

}  // namespace

bool sync_is_auto(const TrainingSpec& training) { return training.sync.mode == "auto"; }

SyncChoice per_step_choice(const std::string& why) { return SyncChoice{0, why + ": per-step sharing"}; }

SyncChoice choose_sync(const TrainingSpec& training, const SyncChoiceInputs& in) {
  if (in.nodes <= 1) return per_step_choice("one node");
  if (in.link.goodput_bytes_s <= 0 || in.step_s <= 0)
    return per_step_choice(figures(in) + ": nothing measured");
  const double budget = kWaitShareOfCompute * in.step_s;
  const double wait = per_step_wait_s(training, in);
  const int share = int(std::lround(100.0 * wait / in.step_s));
  if (wait <= budget)
    return SyncChoice{0, figures(in) + ": per-step sharing waits " + milliseconds(wait) +
                             " a step (" + std::to_string(share) + "% of compute)"};
  const double round = round_wait_s(training, in);
  const int64_t needed = int64_t(std::ceil(round / budget));
  const int64_t steps = std::clamp(needed, kMinLocalSteps, kMaxLocalSteps);
  return SyncChoice{steps, figures(in) + ": per-step sharing would wait " + milliseconds(wait) +
                               " a step (" + std::to_string(share) +
                               "% of compute); local steps, H = " + std::to_string(steps) +
                               " (a round waits " + milliseconds(round) + ")"};
}

void apply_sync_choice(TrainingSpec& training, const SyncChoice& choice) {
  SyncSpec& s = training.sync;
  if (choice.local_steps > 0) {
    s.mode = "local";
    s.bound = 0;
    s.local.steps = choice.local_steps;
  } else {
    s.mode = "bsp";
    s.bound = 1;
  }
}

}  // namespace dtrain::core
