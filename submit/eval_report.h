#pragma once
// What `dtrain-submit eval` shares between one machine and a cluster job: which data, which
// metrics, and the report (text or --json), so a cluster evaluation prints what one machine's
// would.
#include <set>
#include <string>

#include "core/eval/evaluation.h"
#include "core/eval/roc.h"
#include "core/io/saved_model.h"
#include "core/spec/job_spec.h"
#include "submit/commands.h"

namespace dtrain::submit {

// --data (IDX with --labels, a .csv, a folder of images), or the test set of the model's spec.
core::DataSourceSpec eval_source(const EvalArgs& args, const core::JobSpec& spec);
// --metrics: a comma-separated subset of classification, roc, regression; by default the
// model's own kind (regression for a model trained on `labels: regression`).
std::set<std::string> parse_metrics(const std::string& list, bool regression);
// Prints the report; per_class: the ROC curves when roc was asked for. The exit code.
int print_evaluation(const EvalArgs& args, const core::SavedModel& saved,
                     const std::set<std::string>& metrics, const core::Evaluation& eval,
                     const core::RocOneVsAll* per_class);

}  // namespace dtrain::submit
