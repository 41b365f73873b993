#pragma once
// Fine-tuning (`model.init_from`, docs/architecture/core.md "Spec, data and files"): a job starts
// from a trained model's parameters instead of weight_init. The saved model's layers must have the
// job's shapes, layer by layer; the updater, data and training settings are the job's own.
#include <string>
#include <vector>

#include "core/model/model.h"
#include "core/spec/job_spec.h"

namespace dtrain::core {

// When job.model.init_from is set: replaces `initial`'s parameters and batch-norm statistics
// with the file's and returns its updater state if init_from_updater asks (else empty).
// Throws UserError naming the first layer whose shape differs (or a missing, unreadable or
// mismatched updater state) and the fix. Does nothing without init_from.
std::vector<float> init_from_model(const JobSpec& job, Model& initial);

// The same checks without a model to fill: dtrain-submit runs them before a job starts, so a
// mismatch is refused as bad input (exit 2), not as a failed job.
void check_init_from(const JobSpec& job);

// Gives `updater_state` (from init_from_model) to an updater, checking its size: a mismatch
// names both sizes.
void set_initial_updater_state(const JobSpec& job, const std::vector<float>& updater_state,
                               class Updater& updater);

}  // namespace dtrain::core
