#include "core/updaters/updater.h"

#include <cmath>

#include "core/util/check.h"
#include "core/util/error.h"

namespace dtrain::core {

double scheduled_learning_rate(const UpdaterSpec& spec, int64_t iteration) {
  switch (spec.schedule.type) {
    case ScheduleSpec::Type::kNone:
      return spec.learning_rate;
    case ScheduleSpec::Type::kStep:
      return spec.learning_rate *
             std::pow(spec.schedule.decay_rate, std::floor(double(iteration) / spec.schedule.step));
    case ScheduleSpec::Type::kExponential:
      return spec.learning_rate * std::pow(spec.schedule.gamma, double(iteration));
  }
  return spec.learning_rate;
}

kernels::UpdaterRule updater_rule(const std::string& type) {
  using kernels::UpdaterRule;
  static const std::pair<const char*, UpdaterRule> kRules[] = {
      {"sgd", UpdaterRule::kSgd},         {"nesterovs", UpdaterRule::kNesterovs},
      {"adam", UpdaterRule::kAdam},       {"amsgrad", UpdaterRule::kAmsgrad},
      {"rmsprop", UpdaterRule::kRmsProp}};
  for (const auto& [name, rule] : kRules)
    if (type == name) return rule;
  throw UserError("unknown updater '" + type + "'",
                  "use one of: sgd, nesterovs, adam, amsgrad, rmsprop");
}

std::unique_ptr<Updater> Updater::create(const UpdaterSpec& spec, double l2,
                                         std::vector<ParamSegment> segments, int64_t n,
                                         kernels::Backend* backend) {
  return std::unique_ptr<Updater>(new Updater(spec, updater_rule(spec.type), l2,
                                              std::move(segments), n,
                                              backend ? *backend : kernels::backend()));
}

std::vector<float> Updater::host_state() const {
  std::vector<float> out(static_cast<size_t>(state_.size()));
  state_.copy_to_host(out.data());
  return out;
}

void Updater::set_state(const std::vector<float>& host) {
  DTRAIN_CHECK(int64_t(host.size()) == state_.size())
      << "updater state of " << host.size() << " values, expected " << state_.size();
  state_.copy_from_host(host.data());
}

float* Updater::momentum() {
  // Nesterov's velocity, Adam's first moment; sgd and rmsprop keep no momentum.
  const bool has = rule_ == kernels::UpdaterRule::kNesterovs ||
                   rule_ == kernels::UpdaterRule::kAdam || rule_ == kernels::UpdaterRule::kAmsgrad;
  return has ? state_.data() : nullptr;
}

void Updater::compute_step(const float* params, const float* grad, float* step,
                           int64_t iteration, int64_t t, double lr_scale) {
  if (step != grad) backend_.copy(step, grad, n_);
  if (l2_ > 0.0)
    for (const auto& seg : segments_)
      if (seg.regularized)
        backend_.axpy(static_cast<float>(l2_), params + seg.offset, step + seg.offset, seg.size);
  const double lr = scheduled_learning_rate(spec_, iteration) * lr_scale;
  const int64_t step_number = t > 0 ? t : iteration + 1;
  kernels::UpdaterArgs a;
  a.rule = rule_;
  a.g_to_u = step;
  a.state = state_.data();
  a.n = n_;
  a.momentum = static_cast<float>(spec_.momentum);
  a.beta1 = static_cast<float>(spec_.beta1);
  a.beta2 = static_cast<float>(spec_.beta2);
  a.epsilon = static_cast<float>(spec_.epsilon);
  a.rms_decay = static_cast<float>(spec_.rms_decay);
  a.scale = static_cast<float>(lr);
  if (rule_ == kernels::UpdaterRule::kAdam || rule_ == kernels::UpdaterRule::kAmsgrad) {
    // Adam's bias corrections, folded into the step size (in double, then once to float).
    const double b1 = a.beta1, b2 = a.beta2, tt = double(step_number);
    a.scale = static_cast<float>(lr * std::sqrt(1.0 - std::pow(b2, tt)) / (1.0 - std::pow(b1, tt)));
  }
  backend_.updater_step(a);
}

}  // namespace dtrain::core
