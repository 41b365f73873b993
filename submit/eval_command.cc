// dtrain-submit eval model.dtm [--data ...]: evaluates a saved model on labelled data.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/eval/evaluate.h"
#include "core/io/saved_model.h"
#include "core/train/training_data.h"
#include "core/util/error.h"
#include "submit/commands.h"
#include "submit/exit_codes.h"

namespace dtrain::submit {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

core::DataSourceSpec source_from_args(const EvalArgs& args, const core::JobSpec& spec) {
  core::DataSourceSpec source;
  if (args.data.empty()) {
    if (!spec.data.test.present())
      throw core::UserError("the model's job spec names no test set",
                            "pass --data (IDX images with --labels, or a CSV file)");
    return spec.data.test;
  }
  if (!args.labels.empty()) {
    source.format = "idx";
    source.images = args.data;
    source.labels = args.labels;
  } else if (std::filesystem::is_directory(args.data)) {
    source.format = "images";
    source.path = args.data;
  } else if (ends_with(args.data, ".csv")) {
    source.format = "csv";
    source.path = args.data;
    source.label_column = args.label_column;
    source.header = args.header;
  } else {
    throw core::UserError("cannot tell the format of '" + args.data + "'",
                          "for IDX images also pass --labels FILE; CSV files must end in .csv; "
                          "an image folder must be a folder");
  }
  return source;
}

// --metrics: a comma-separated subset of the kinds this command computes.
std::set<std::string> parse_metrics(const std::string& list) {
  std::set<std::string> out;
  std::stringstream in(list);
  for (std::string m; std::getline(in, m, ',');) {
    if (m != "classification" && m != "roc")
      throw core::UserError("unknown metric '" + m + "' in --metrics",
                            "use classification, roc or both: --metrics classification,roc");
    out.insert(m);
  }
  if (out.empty()) throw core::UserError("--metrics names no metric", "e.g. --metrics roc");
  return out;
}

std::string class_label(const core::SavedModel& saved, int64_t c) {
  const auto& names = saved.file.class_names;
  return size_t(c) < names.size() ? names[size_t(c)] : std::to_string(c);
}

// The AUC of each class against the rest, printed (or as JSON fields), and the curves to a CSV.
std::string roc_report(const core::SavedModel& saved, const core::RocOneVsAll& roc, bool json,
                       const std::string& csv_path) {
  int width = 5;  // the longest class label, for the table's column
  for (int64_t c = 0; c < roc.classes(); ++c)
    width = std::max(width, int(class_label(saved, c).size()));
  std::string out = json ? ", \"auc\": [" : "ROC, each class against the rest\n";
  char line[160];
  if (!json) {
    std::snprintf(line, sizeof line, "%-*s  auc\n", width, "class");
    out += line;
  }
  for (int64_t c = 0; c < roc.classes(); ++c) {
    const double auc = roc.of(c).auc();
    if (json)
      std::snprintf(line, sizeof line, "%s%s", c ? ", " : "",
                    std::isnan(auc) ? "null" : std::to_string(auc).c_str());
    else
      std::snprintf(line, sizeof line, "%-*s  %.6f\n", width, class_label(saved, c).substr(0, 100).c_str(), auc);
    out += line;
  }
  std::snprintf(line, sizeof line, json ? "], \"macro_auc\": %.6f" : "macro AUC: %.6f\n",
                roc.macro_auc());
  out += line;
  if (!csv_path.empty()) {
    std::ofstream f(csv_path);
    f << "class,threshold,fpr,tpr\n";
    for (int64_t c = 0; c < roc.classes(); ++c)
      for (const core::Roc::Point& p : roc.of(c).curve())
        f << class_label(saved, c) << ',' << p.threshold << ',' << p.fpr << ',' << p.tpr << '\n';
    if (!f) throw core::UserError("cannot write '" + csv_path + "'", "check the folder");
  }
  return out;
}

}  // namespace

int run_eval(const EvalArgs& args) {
  core::SavedModel saved;
  core::Dataset data;
  std::set<std::string> metrics;
  try {
    metrics = parse_metrics(args.metrics);
    saved = core::load_saved_model(args.model_path);
    data = core::load_source(source_from_args(args, saved.spec), saved.model->num_outputs(),
                             saved.model->input_shape(), args.data.empty() ? "test set" : args.data);
    saved.normalizer.apply(data.features);
  } catch (const core::UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitBadInput;
  }
  const int64_t top_n = args.top_n > 0 ? args.top_n : saved.spec.evaluation.top_n;
  const bool want_roc = metrics.count("roc") > 0;
  core::RocOneVsAll per_class;
  core::Evaluation eval =
      core::evaluate(*saved.model, data, top_n, 256, 0, -1, want_roc ? &per_class : nullptr);
  std::string roc;
  if (want_roc) {
    try {
      roc = roc_report(saved, per_class, args.json, args.roc_csv);
    } catch (const core::UserError& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return kExitBadInput;
    }
  }
  const bool classification = metrics.count("classification") > 0;
  if (args.json) {
    std::printf("{\"examples\": %lld", (long long)eval.count());
    if (classification)
      std::printf(", \"accuracy\": %.6f, \"top_n\": %lld, \"top_n_accuracy\": %.6f, "
                  "\"macro_f1\": %.6f, \"loss\": %.6f",
                  eval.accuracy(), (long long)eval.top_n(), eval.top_n_accuracy(),
                  eval.macro_f1(), eval.mean_loss());
    std::printf("%s}\n", roc.c_str());
  } else {
    std::printf("model %s (job %s)\n%s%s", args.model_path.c_str(), saved.spec.name.c_str(),
                classification ? eval.report().c_str() : "", roc.c_str());
  }
  return kExitSuccess;
}

}  // namespace dtrain::submit
