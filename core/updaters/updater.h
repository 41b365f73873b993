#pragma once
// Updaters turn a gradient g into the step u that is subtracted from the parameters
// (params -= u). L2 and the learning-rate schedule are applied here, so u is the complete
// update: gradient sharing encodes u, never g (DESIGN.md §5).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/layers/layer.h"
#include "core/spec/job_spec.h"

namespace dtrain::core {

// Learning rate at `iteration` (0-based) under the schedule.
double scheduled_learning_rate(const UpdaterSpec& spec, int64_t iteration);

class Updater {
 public:
  virtual ~Updater() = default;

  // segments: where L2 applies (Model::segments()); n: number of parameters.
  static std::unique_ptr<Updater> create(const UpdaterSpec& spec, double l2,
                                         std::vector<ParamSegment> segments, int64_t n);

  // step = u for gradient `grad` at parameters `params`; step may alias grad. The schedule is
  // evaluated at `iteration`; bias corrections use t, this updater's own step number (1-based;
  // 0 means iteration + 1; they differ when several workers share one schedule).
  // lr_scale multiplies the scheduled learning rate (learning-rate scaling with the number of
  // workers, core/train/corrections.h).
  void compute_step(const float* params, const float* grad, float* step, int64_t iteration,
                    int64_t t = 0, double lr_scale = 1.0);

  // The momentum (first moment) vector, or null for updaters without one: gradient sharing
  // clears the elements a message sent (momentum factor masking).
  virtual float* momentum() { return nullptr; }

  const std::string& type() const { return spec_.type; }
  // Momentum / moment estimates, flat; saved in model files so training can resume.
  std::vector<float>& state() { return state_; }
  const std::vector<float>& state() const { return state_; }

 protected:
  Updater(const UpdaterSpec& spec, double l2, std::vector<ParamSegment> segments, int64_t n,
          int64_t state_vectors)
      : spec_(spec), l2_(l2), segments_(std::move(segments)), n_(n),
        state_(static_cast<size_t>(n * state_vectors), 0.0f) {}
  // g -> u in place over [0, n); t = iteration + 1.
  virtual void rule(float* g_to_u, float lr, int64_t t) = 0;

  UpdaterSpec spec_;
  double l2_;
  std::vector<ParamSegment> segments_;
  int64_t n_;
  std::vector<float> state_;
};

}  // namespace dtrain::core
