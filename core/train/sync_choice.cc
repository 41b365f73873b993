#include "core/train/sync_choice.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/codec/message.h"
#include "core/train/local_steps.h"
#include "core/util/rng.h"

namespace dtrain::core {
namespace {

// A sparse element on the wire: 31 bits of index and a sign (docs/architecture/core.md).
constexpr double kBytesPerElement = 4.0;

double step_goodput(const LinkFigures& link) {
  return link.step_goodput_bytes_s > 0 ? link.step_goodput_bytes_s : link.goodput_bytes_s;
}

std::string figures(const SyncChoiceInputs& in) {
  char text[384];
  int n = std::snprintf(
      text, sizeof text,
      "RTT %.2f ms (%d hop%s apart), %.1f MB/s for a step's messages and %.1f MB/s for a "
      "round's, a step computes %.2f ms and shares in %.2f ms",
      in.link.rtt_s * 1e3, in.path_hops, in.path_hops == 1 ? "" : "s",
      step_goodput(in.link) / 1e6, in.link.goodput_bytes_s / 1e6, in.step_s * 1e3,
      in.step_work_s * 1e3);
  if (in.rehearsal && n > 0 && size_t(n) < sizeof text)
    std::snprintf(text + n, sizeof text - size_t(n), "; rehearsed %d lock steps and rounds of %.0f kB",
                  in.rehearsal->steps, in.rehearsal->round_bytes / 1e3);
  return text;
}

// What one node waits for each step under bsp: the others' messages of the step before, sent
// from up to the mesh's longest path away (half a round trip a hop), and the step's own
// encoding and applying.
double per_step_wait_s(const TrainingSpec& t, const SyncChoiceInputs& in) {
  const double others = double(in.workers) * double(in.nodes - 1) / double(in.nodes);
  const double bytes = others * step_message_bytes(t, in.num_params);
  return double(std::max(1, in.path_hops)) * in.link.rtt_s / 2 + bytes / step_goodput(in.link) +
         in.step_work_s;
}

// A round of local steps: every other node's levels of the pseudo-gradient, a round trip, and
// the round's own work.
double round_work_s(const SyncChoiceInputs& in) {
  return in.round_work_s + double(in.nodes - 1) * in.part_decode_s;
}
double round_wait_s(const SyncChoiceInputs& in) {
  return in.link.rtt_s + double(in.nodes - 1) * in.round_bytes / in.link.goodput_bytes_s +
         round_work_s(in);
}

std::string milliseconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f ms", s * 1e3);
  return text;
}

std::string round_figures(const SyncChoiceInputs& in, double round_s) {
  char text[128];
  std::snprintf(text, sizeof text, "a round waits %.2f ms: its message %.0f kB, its work %.2f ms",
                round_s * 1e3, in.round_bytes / 1e3, round_work_s(in) * 1e3);
  return text;
}

// The smallest H whose rounds wait at most kWaitShareOfCompute of its steps' compute, within
// kMinLocalSteps..kMaxLocalSteps.
int64_t local_steps_for(const SyncChoiceInputs& in, double round_s) {
  const int64_t needed = int64_t(std::ceil(round_s / (kWaitShareOfCompute * in.step_s)));
  return std::clamp(needed, kMinLocalSteps, kMaxLocalSteps);
}

// Where the nodes rehearsed: each mode's time a step as they took it, a lock step's for
// per-step sharing, a step back to back and a round over H for local steps.
SyncChoice choose_from_rehearsal(const SyncChoiceInputs& in) {
  const RehearsalFigures& r = *in.rehearsal;
  const double larger = r.round_bytes > 0 ? std::max(1.0, in.round_bytes / r.round_bytes) : 1.0;
  const double round = r.round_s * larger;
  const int64_t steps = local_steps_for(in, round);
  const double local = r.free_step_s + round / double(steps);
  const bool sharing = r.lock_step_s < local;
  char text[256];
  std::snprintf(text, sizeof text,
                ": per-step sharing takes %.2f ms a step, local steps %.2f ms (H = %lld: %.2f "
                "ms a step and a round of %.2f ms): %s",
                r.lock_step_s * 1e3, local * 1e3, static_cast<long long>(steps),
                r.free_step_s * 1e3, round * 1e3,
                sharing ? "per-step sharing" : ("local steps, H = " + std::to_string(steps)).c_str());
  return SyncChoice{sharing ? 0 : steps, figures(in) + text, false,
                    sharing ? r.lock_step_s : local};
}

}  // namespace

double round_message_bytes(const LocalStepsSpec& local, const float* values, int64_t n) {
  std::vector<float> left(values, values + n);
  float tau = LocalSteps::threshold_for(left, local.density);
  double bytes = 0.0;
  for (int64_t level = 0; level < local.levels; ++level, tau /= 2) {
    int64_t count = 0;
    for (float& v : left) {
      if (std::fabs(v) < tau) continue;
      v -= v > 0 ? tau : -tau;
      ++count;
    }
    bytes += choose_encoding(count, n) == Encoding::kSparse ? kBytesPerElement * double(count)
                                                            : double(bitmap_words(n)) * 4.0;
  }
  return bytes;
}

double step_message_bytes(const TrainingSpec& training, int64_t num_params) {
  return kBytesPerElement * double(num_params) * per_step_density(training.threshold);
}

double per_step_density(const ThresholdSpec& t) {
  return t.algorithm == "target_sparsity" ? t.target_sparsity : t.max_sparsity;
}

double pseudo_gradient_round_bytes(const LocalStepsSpec& local, int64_t n) {
  if (n <= 0) return 0.0;
  const int64_t m = std::min(n, kRoundSample);
  Rng rng(1);  // the same weight on every node and every run
  std::vector<float> sample(size_t(m), 0.f);
  for (float& v : sample) v = rng.normal(0.f, 1.f);
  return round_message_bytes(local, sample.data(), m) * double(n) / double(m);
}

bool sync_is_auto(const TrainingSpec& training) { return training.sync.mode == "auto"; }

SyncChoice per_step_choice(const std::string& why) {
  return SyncChoice{0, why + ": per-step sharing"};
}

SyncChoice choose_sync(const TrainingSpec& training, const SyncChoiceInputs& in) {
  if (in.nodes <= 1) return per_step_choice("one node");
  if (in.link.goodput_bytes_s <= 0 || in.step_s <= 0)
    return per_step_choice(figures(in) + ": nothing measured");
  if (in.rehearsal) return choose_from_rehearsal(in);
  const double wait = per_step_wait_s(training, in);
  const long share = std::lround(std::min(1e9, 100.0 * wait / in.step_s));
  const double round = round_wait_s(in);
  const int64_t steps = local_steps_for(in, round);
  // Where bandwidth is what is short, a round's levels may cost more than the steps they
  // replace: per-step sharing then stays.
  if (round / double(steps) >= wait)
    return SyncChoice{0, figures(in) + ": per-step sharing waits " + milliseconds(wait) +
                             " a step (" + std::to_string(share) + "% of compute), local steps " +
                             milliseconds(round / double(steps)) + " (H = " +
                             std::to_string(steps) + "; " + round_figures(in, round) +
                             "): per-step sharing",
                      false, in.step_s + wait};
  return SyncChoice{steps, figures(in) + ": per-step sharing would wait " + milliseconds(wait) +
                               " a step (" + std::to_string(share) +
                               "% of compute); local steps, H = " + std::to_string(steps) + " (" +
                               round_figures(in, round) + ")",
                    false, in.step_s + round / double(steps)};
}

int rehearsal_steps(const TrainingSpec& training, const SyncChoiceInputs& in) {
  SyncChoiceInputs probed = in;
  probed.rehearsal.reset();
  return rehearsal_steps_for(in.step_s + per_step_wait_s(training, probed));
}

int rehearsal_steps_for(double period) {
  if (!(period > 0)) return kMaxRehearsalLockSteps;
  return int(std::clamp(std::ceil(kRehearsalSeconds / period), double(kMinRehearsalLockSteps),
                        double(kMaxRehearsalLockSteps)));
}

bool worth_rehearsing(const SyncChoiceInputs& in) {
  return in.nodes > 1 && in.step_s > 0 && in.step_s <= kLongestRehearsedStep;
}

double node_step_bytes(const TrainingSpec& training, const SyncChoiceInputs& in) {
  const double settled =
      training.threshold.algorithm == "adaptive" ? kSettledShareOfBand : 1.0;
  return settled * step_message_bytes(training, in.num_params) * double(in.workers) /
         double(std::max(1, in.nodes));
}

void apply_sync_choice(TrainingSpec& training, const SyncChoice& choice) {
  SyncSpec& s = training.sync;
  if (mode_is_auto(training))
    training.mode = choice.allreduce ? TrainingMode::kAllreduce : TrainingMode::kGradientSharing;
  if (choice.local_steps > 0 && !choice.allreduce) {
    s.mode = "local";
    s.bound = 0;
    s.local.steps = choice.local_steps;
  } else {
    s.mode = "bsp";
    s.bound = 1;
  }
}

}  // namespace dtrain::core
