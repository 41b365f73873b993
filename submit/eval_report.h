#pragma once
// What `dtrain-submit eval` shares between one machine and a cluster job: which data, which
// metrics, and the report (text or --json), so a cluster evaluation prints what one machine's
// would.
#include <set>
#include <string>
#include <vector>

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
// The ROC's figures: each class's AUC against the rest (NaN where undefined), their mean.
struct RocFigures {
  std::vector<double> auc;
  double macro_auc = 0;
  std::string curves_file;  // where the curves were written (a cluster job's: its own folder)
  static RocFigures of(const core::RocOneVsAll& roc);
};
// The model's class names (or numbers), as reports and the ROC curve CSV name them.
std::vector<std::string> class_labels(const core::SavedModel& saved);
// Prints the report; per_class: the ROC's figures when roc was asked for. The exit code.
int print_evaluation(const EvalArgs& args, const core::SavedModel& saved,
                     const std::set<std::string>& metrics, const core::Evaluation& eval,
                     const RocFigures* per_class);

}  // namespace dtrain::submit
