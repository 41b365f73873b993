#include "core/updaters/updater.h"

#include <cmath>
#include <cstring>

#include "core/updaters/rules.h"
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

std::unique_ptr<Updater> Updater::create(const UpdaterSpec& spec, double l2,
                                         std::vector<ParamSegment> segments, int64_t n) {
  if (spec.type == "sgd") return std::make_unique<SgdRule>(spec, l2, std::move(segments), n);
  if (spec.type == "nesterovs")
    return std::make_unique<NesterovsRule>(spec, l2, std::move(segments), n);
  if (spec.type == "adam")
    return std::make_unique<AdamRule>(spec, l2, std::move(segments), n, false);
  if (spec.type == "amsgrad")
    return std::make_unique<AdamRule>(spec, l2, std::move(segments), n, true);
  if (spec.type == "rmsprop")
    return std::make_unique<RmsPropRule>(spec, l2, std::move(segments), n);
  throw UserError("unknown updater '" + spec.type + "'",
                  "use one of: sgd, nesterovs, adam, amsgrad, rmsprop");
}

void Updater::compute_step(const float* params, const float* grad, float* step,
                           int64_t iteration, int64_t t, double lr_scale) {
  if (step != grad) std::memcpy(step, grad, sizeof(float) * n_);
  if (l2_ > 0.0) {
    const float l2 = static_cast<float>(l2_);
    for (const auto& seg : segments_) {
      if (!seg.regularized) continue;
      float* s = step + seg.offset;
      const float* w = params + seg.offset;
      for (int64_t i = 0; i < seg.size; ++i) s[i] += l2 * w[i];
    }
  }
  rule(step, static_cast<float>(scheduled_learning_rate(spec_, iteration) * lr_scale),
       t > 0 ? t : iteration + 1);
}

}  // namespace dtrain::core
