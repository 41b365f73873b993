// dtrain-submit eval model.dtm [--data ...]: evaluates a saved model on labelled data, here
// (--cluster: submit/cluster_task_command.cc).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/eval/evaluate.h"
#include "core/io/saved_model.h"
#include "core/train/training_data.h"
#include "core/util/error.h"
#include "submit/commands.h"
#include "submit/eval_report.h"
#include "submit/exit_codes.h"

namespace dtrain::submit {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

core::DataSourceSpec eval_source(const EvalArgs& args, const core::JobSpec& spec) {
  core::DataSourceSpec source;
  if (args.data.empty()) {
    if (!spec.data.test.present())
      throw core::UserError("the model's job spec names no test set",
                            "pass --data (IDX images with --labels, or a CSV file)");
    const std::string& named = spec.data.test.format == "idx" ? spec.data.test.images
                                                               : spec.data.test.path;
    if (spec.data.test.format != "packed" && !named.empty() && named[0] != '/' &&
        !std::filesystem::exists(named))
      throw core::UserError("the model's job names its test set '" + named +
                                "', relative to the job spec's folder, and it is not here",
                            "run from the spec's folder, or pass --data");
    return spec.data.test;
  }
  if (!args.labels.empty()) {
    source.format = "idx";
    source.images = args.data;
    source.labels = args.labels;
  } else if (std::filesystem::is_directory(args.data)) {
    source.format = "images";
    source.path = args.data;
  } else if (ends_with(args.data, ".dtb")) {  // a packed export's file(s): a glob, often
    source.format = "packed";
    source.path = args.data;
  } else if (ends_with(args.data, ".csv")) {
    source.format = "csv";
    source.path = args.data;
    source.label_column = args.label_column;
    source.header = args.header;
    source.regression = spec.regression();
  } else {
    throw core::UserError("cannot tell the format of '" + args.data + "'",
                          "for IDX images also pass --labels FILE; CSV files must end in .csv, "
                          "packed files (dtrain-submit export) in .dtb (a glob: 'DIR/test-*.dtb'); "
                          "an image folder must be a folder");
  }
  return source;
}

std::set<std::string> parse_metrics(const std::string& list, bool regression) {
  std::set<std::string> out;
  std::stringstream in(list.empty() ? regression ? "regression" : "classification" : list);
  for (std::string m; std::getline(in, m, ',');) {
    if (m != "classification" && m != "roc" && m != "regression")
      throw core::UserError("unknown metric '" + m + "' in --metrics",
                            "use classification, roc or regression, e.g. --metrics "
                            "classification,roc");
    if ((m == "regression") != regression)
      throw core::UserError(
          "--metrics " + m + " does not fit this model: it predicts " +
              (regression ? "values (it was trained on labels: regression)" : "classes"),
          regression ? "use --metrics regression" : "use --metrics classification or roc");
    out.insert(m);
  }
  if (out.empty()) throw core::UserError("--metrics names no metric", "e.g. --metrics roc");
  return out;
}

namespace {

std::string class_label(const core::SavedModel& saved, int64_t c) {
  const auto& names = saved.file.class_names;
  return size_t(c) < names.size() ? names[size_t(c)] : std::to_string(c);
}

// The AUC of each class against the rest, printed (or as JSON fields).
std::string roc_report(const core::SavedModel& saved, const RocFigures& roc, bool json) {
  const int64_t classes = int64_t(roc.auc.size());
  int width = 5;  // the longest class label, for the table's column
  for (int64_t c = 0; c < classes; ++c) width = std::max(width, int(class_label(saved, c).size()));
  std::string out = json ? ", \"auc\": [" : "ROC, each class against the rest\n";
  char line[160];
  if (!json) {
    std::snprintf(line, sizeof line, "%-*s  auc\n", width, "class");
    out += line;
  }
  for (int64_t c = 0; c < classes; ++c) {
    const double auc = roc.auc[size_t(c)];
    if (json)
      std::snprintf(line, sizeof line, "%s%s", c ? ", " : "",
                    std::isnan(auc) ? "null" : std::to_string(auc).c_str());
    else
      std::snprintf(line, sizeof line, "%-*s  %.6f\n", width, class_label(saved, c).substr(0, 100).c_str(), auc);
    out += line;
  }
  std::snprintf(line, sizeof line, json ? "], \"macro_auc\": %.6f" : "macro AUC: %.6f\n",
                roc.macro_auc);
  out += line;
  if (roc.curves_file.empty()) return out;
  return out + (json ? ", \"roc_csv\": " + nlohmann::json(roc.curves_file).dump()
                     : "ROC curves in " + roc.curves_file + "\n");
}

void print_regression(const EvalArgs& args, const core::SavedModel& saved,
                      const core::Evaluation& eval) {
  const core::RegressionEvaluation& r = eval.regression_metrics();
  if (!args.json) {
    std::printf("model %s (job %s)\n%s", args.model_path.c_str(), saved.spec.name.c_str(),
                eval.report().c_str());
    return;
  }
  // Full precision: scripts compare these with their own computations.
  auto column = [&](const char* key, double (core::RegressionEvaluation::*metric)(int64_t) const) {
    std::printf(", \"%s\": [", key);
    for (int64_t c = 0; c < r.columns(); ++c) {
      const double v = (r.*metric)(c);
      std::printf(std::isnan(v) ? "%snull" : "%s%.17g", c ? ", " : "", v);
    }
    std::printf("]");
  };
  std::printf("{\"examples\": %lld, \"loss\": %.17g", (long long)eval.count(), eval.mean_loss());
  column("mse", &core::RegressionEvaluation::mse);
  column("mae", &core::RegressionEvaluation::mae);
  column("rmse", &core::RegressionEvaluation::rmse);
  column("r2", &core::RegressionEvaluation::r2);
  std::printf("}\n");
}

}  // namespace

std::vector<std::string> class_labels(const core::SavedModel& saved) {
  std::vector<std::string> out;
  for (int64_t c = 0; c < saved.model->num_outputs(); ++c) out.push_back(class_label(saved, c));
  return out;
}

RocFigures RocFigures::of(const core::RocOneVsAll& roc) {
  RocFigures f;
  for (int64_t c = 0; c < roc.classes(); ++c) f.auc.push_back(roc.of(c).auc());
  f.macro_auc = roc.macro_auc();
  return f;
}

int print_evaluation(const EvalArgs& args, const core::SavedModel& saved,
                     const std::set<std::string>& metrics, const core::Evaluation& eval,
                     const RocFigures* per_class) {
  const std::string roc = per_class ? roc_report(saved, *per_class, args.json) : "";
  const bool classification = metrics.count("classification") > 0;
  if (eval.is_regression()) {
    print_regression(args, saved, eval);
    return kExitSuccess;
  }
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

int run_eval(const EvalArgs& args) {
  core::SavedModel saved;
  core::Dataset data;
  std::set<std::string> metrics;
  try {
    if (!args.shards.empty())
      throw core::UserError("--shards is for --cluster (files the nodes hold)",
                            "add --cluster, or here give the files with --data 'DIR/test-*.dtb'");
    saved = core::load_saved_model(args.model_path);
    metrics = parse_metrics(args.metrics, saved.spec.regression());
    data = core::load_source(eval_source(args, saved.spec), saved.model->num_outputs(),
                             saved.model->input_shape(), args.data.empty() ? "test set" : args.data);
    saved.normalizer.apply(data.features);
  } catch (const core::UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitBadInput;
  }
  const int64_t top_n = args.top_n > 0 ? args.top_n : saved.spec.evaluation.top_n;
  const bool want_roc = metrics.count("roc") > 0;
  core::RocOneVsAll per_class;
  const core::Evaluation eval =
      core::evaluate(*saved.model, data, top_n, 256, 0, -1, want_roc ? &per_class : nullptr);
  if (want_roc && !args.roc_csv.empty()) {
    std::ofstream f(args.roc_csv);
    f << per_class.curves_csv(class_labels(saved));
    if (!f) {
      std::fprintf(stderr, "error: cannot write '%s'\n  fix: check the folder\n", args.roc_csv.c_str());
      return kExitBadInput;
    }
  }
  RocFigures figures = RocFigures::of(per_class);
  figures.curves_file = args.roc_csv;
  return print_evaluation(args, saved, metrics, eval, want_roc ? &figures : nullptr);
}

}  // namespace dtrain::submit
