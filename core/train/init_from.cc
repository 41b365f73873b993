#include "core/train/init_from.h"


#include "core/io/saved_model.h"
#include "core/layers/layer.h"
#include "core/model/model_builder.h"
#include "core/updaters/updater.h"
#include "core/util/error.h"

namespace dtrain::core {
namespace {

const char* kFix = "make model.layers the saved model's (dtrain-submit eval FILE prints its spec), "
                   "or drop model.init_from";

void check_layers(const JobSpec& job, const ModelSpec& saved) {
  const auto mine = build_layers(job.model);
  const auto theirs = build_layers(saved);
  const std::string file = "'" + job.model.init_from + "'";
  if (mine.size() != theirs.size())
    throw UserError("model.init_from: the job's model has " + std::to_string(mine.size()) +
                        " layers but " + file + " has " + std::to_string(theirs.size()),
                    kFix);
  for (size_t i = 0; i < mine.size(); ++i) {
    const Layer& a = *mine[i];
    const Layer& b = *theirs[i];
    if (a.kind() != b.kind() || a.num_params() != b.num_params() || a.num_state() != b.num_state())
      throw UserError("model.init_from: model.layers[" + std::to_string(i) + "] is " + a.kind() +
                          " with " + std::to_string(a.num_params()) + " parameters, but in " +
                          file + " it is " + b.kind() + " with " +
                          std::to_string(b.num_params()),
                      kFix);
  }
}

}  // namespace

std::vector<float> init_from_model(const JobSpec& job, Model& initial) {
  if (job.model.init_from.empty()) return {};
  SavedModel saved = load_saved_model(job.model.init_from, job.model.init_from_roots.get());
  check_layers(job, saved.spec.model);
  initial.set_params(saved.file.params.data());
  if (!saved.file.state.empty()) initial.set_state(saved.file.state.data());
  if (!job.model.init_from_updater) return {};
  if (!saved.file.has_updater || saved.file.updater_state.empty())
    throw UserError("model.init_from_updater: '" + job.model.init_from + "' holds no updater state",
                    "drop init_from_updater (the updater then starts empty)");
  if (saved.file.updater_type != job.model.updater.type)
    throw UserError("model.init_from_updater: '" + job.model.init_from + "' holds the state of a " +
                        saved.file.updater_type + " updater, the job uses " +
                        job.model.updater.type,
                    "use model.updater.type: " + saved.file.updater_type +
                        ", or drop init_from_updater");
  return saved.file.updater_state;
}

void check_init_from(const JobSpec& job) {
  if (job.model.init_from.empty()) return;
  Model scratch(job.model);
  init_from_model(job, scratch);
}

void set_initial_updater_state(const JobSpec& job, const std::vector<float>& updater_state,
                               Updater& updater) {
  if (updater_state.empty()) return;
  if (int64_t(updater_state.size()) != updater.state_size())
    throw UserError("model.init_from_updater: '" + job.model.init_from + "' holds " +
                        std::to_string(updater_state.size()) + " updater values, the job's " +
                        job.model.updater.type + " updater has " +
                        std::to_string(updater.state_size()),
                    "drop init_from_updater (the updater then starts empty)");
  updater.set_state(updater_state);
}

}  // namespace dtrain::core
