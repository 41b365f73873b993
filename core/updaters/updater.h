#pragma once
// Updaters turn a gradient g into the step u that is subtracted from the parameters
// (params -= u). L2 and the learning-rate schedule are applied here, so u is the complete
// update: gradient sharing encodes u, never g (docs/architecture/core.md, "The update").
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/layers/layer.h"
#include "core/spec/job_spec.h"
#include "kernels/backend.h"

namespace dtrain::core {

// The rule an updater type names; throws UserError listing the valid names.
kernels::UpdaterRule updater_rule(const std::string& type);

// Learning rate at `iteration` (0-based) under the schedule.
double scheduled_learning_rate(const UpdaterSpec& spec, int64_t iteration);

// The rules themselves (sgd, nesterovs, adam, amsgrad, rmsprop) are the backend's
// (Backend::updater_step; formulas in kernels/cpu/updaters.cc): this class adds L2, evaluates
// the schedule and keeps the state.
class Updater {
 public:
  // segments: where L2 applies (Model::segments()); n: number of parameters. Throws UserError
  // for an unknown type. The rule runs on `backend` (default: the process's).
  static std::unique_ptr<Updater> create(const UpdaterSpec& spec, double l2,
                                         std::vector<ParamSegment> segments, int64_t n,
                                         kernels::Backend* backend = nullptr);

  // step = u for gradient `grad` at parameters `params`; step may alias grad. The schedule is
  // evaluated at `iteration`; bias corrections use t, this updater's own step number (1-based;
  // 0 means iteration + 1; they differ when several workers share one schedule).
  // lr_scale multiplies the scheduled learning rate (learning-rate scaling with the number of
  // workers, core/train/corrections.h).
  void compute_step(const float* params, const float* grad, float* step, int64_t iteration,
                    int64_t t = 0, double lr_scale = 1.0);

  // The momentum (first moment) vector, or null for updaters without one: gradient sharing
  // clears the elements a message sent (momentum factor masking).
  float* momentum();

  const std::string& type() const { return spec_.type; }
  // Momentum / moment estimates, flat, in the backend's memory (a GPU's for a GPU worker);
  // copied out into model files so training can resume.
  std::vector<float> host_state() const;
  void set_state(const std::vector<float>& host);  // same size as host_state()
  int64_t state_size() const { return state_.size(); }

 private:
  Updater(const UpdaterSpec& spec, kernels::UpdaterRule rule, double l2,
          std::vector<ParamSegment> segments, int64_t n, kernels::Backend& backend)
      : spec_(spec), rule_(rule), l2_(l2), segments_(std::move(segments)), n_(n),
        backend_(backend) {
    if (!backend.host_memory()) state_.set_memory(&backend);
    state_.resize({n * kernels::updater_state_vectors(rule)});
    state_.zero();
  }

  UpdaterSpec spec_;
  kernels::UpdaterRule rule_;
  double l2_;
  std::vector<ParamSegment> segments_;
  int64_t n_;
  kernels::Backend& backend_;
  Tensor state_;
};

}  // namespace dtrain::core
