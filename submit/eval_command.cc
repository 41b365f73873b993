// dtrain-submit eval model.dtm [--data ...]: evaluates a saved model on labelled data.
#include <cstdio>
#include <filesystem>

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

}  // namespace

int run_eval(const EvalArgs& args) {
  core::SavedModel saved;
  core::Dataset data;
  try {
    saved = core::load_saved_model(args.model_path);
    data = core::load_source(source_from_args(args, saved.spec), saved.model->num_outputs(),
                             saved.model->input_shape());
    core::reshape_features(data, saved.model->input_shape(), args.data.empty() ? "test set"
                                                                               : args.data);
    saved.normalizer.apply(data.features);
  } catch (const core::UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitBadInput;
  }
  const int64_t top_n = args.top_n > 0 ? args.top_n : saved.spec.evaluation.top_n;
  core::Evaluation eval = core::evaluate(*saved.model, data, top_n);
  if (args.json) {
    std::printf("{\"examples\": %lld, \"accuracy\": %.6f, \"top_n\": %lld, "
                "\"top_n_accuracy\": %.6f, \"macro_f1\": %.6f, \"loss\": %.6f}\n",
                (long long)eval.count(), eval.accuracy(), (long long)eval.top_n(),
                eval.top_n_accuracy(), eval.macro_f1(), eval.mean_loss());
  } else {
    std::printf("model %s (job %s)\n%s", args.model_path.c_str(), saved.spec.name.c_str(),
                eval.report().c_str());
  }
  return kExitSuccess;
}

}  // namespace dtrain::submit
