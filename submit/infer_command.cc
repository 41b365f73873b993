// dtrain-submit infer model.dtm --input X --output Y: predictions keyed by the input's key
// column, row number or (a folder of images) file path, one CSV line per example:
// key,predicted,p0,...,p{K-1}; a model trained on an image folder names its classes instead
// (key,predicted,p_cat,p_dog,...; predicted is the name). A regression model (trained on
// `labels: regression`) writes its values: key,y0,...,y{K-1}.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <memory>

#include "core/data/csv_reader.h"
#include "core/data/idx_reader.h"
#include "core/data/image_folder.h"
#include "core/io/saved_model.h"
#include "core/util/error.h"
#include "submit/commands.h"
#include "submit/exit_codes.h"

namespace dtrain::submit {
namespace {

struct Inputs {
  core::Tensor features;
  std::vector<std::string> keys;
};

bool is_csv(const std::string& path) {
  return path.size() >= 4 && path.compare(path.size() - 4, 4, ".csv") == 0;
}

Inputs read_inputs(const InferArgs& args, const core::Shape& example_shape) {
  Inputs in;
  const int64_t width = core::shape_size(example_shape);
  std::vector<float> values;
  if (std::filesystem::is_directory(args.input)) {
    core::ImageFiles files = core::read_image_files(args.input, example_shape);
    in.features = std::move(files.features);
    in.keys = std::move(files.paths);
    return in;
  }
  if (is_csv(args.input)) {
    std::ifstream file(args.input);
    if (!file) throw core::UserError("cannot open '" + args.input + "'", "check the path");
    std::string line;
    int64_t line_no = 0, row = 0;
    while (std::getline(file, line)) {
      ++line_no;
      if ((line_no == 1 && args.header) || line.find_first_not_of(" \r\t") == std::string::npos)
        continue;
      auto cells = core::split_csv_line(line);
      const int64_t expected = width + (args.key_column >= 0 ? 1 : 0);
      if (static_cast<int64_t>(cells.size()) != expected)
        throw core::UserError(args.input + ":" + std::to_string(line_no) + ": " +
                                  std::to_string(cells.size()) + " columns, the model needs " +
                                  std::to_string(expected),
                              args.key_column >= 0
                                  ? "give one key column plus one column per input value"
                                  : "give one column per input value (or --key-column N)");
      std::string key = std::to_string(row);
      for (int64_t c = 0; c < expected; ++c) {
        if (c == args.key_column) {
          key = cells[c];
          continue;
        }
        char* end = nullptr;
        float v = std::strtof(cells[c].c_str(), &end);
        if (cells[c].empty() || *end != '\0')
          throw core::UserError(args.input + ":" + std::to_string(line_no) + ": column " +
                                    std::to_string(c) + " is '" + cells[c] + "', not a number",
                                args.header ? "fix the row" : "if line 1 is a header, pass --header");
        values.push_back(v);
      }
      in.keys.push_back(key);
      ++row;
    }
  } else {
    core::IdxArray idx = core::read_idx(args.input);
    const int64_t n = idx.dims[0];
    if (static_cast<int64_t>(idx.values.size()) != n * width)
      throw core::UserError("'" + args.input + "' examples have " +
                                std::to_string(idx.values.size() / n) + " values, the model needs " +
                                std::to_string(width),
                            "pass inputs shaped like the training data");
    values.assign(idx.values.begin(), idx.values.end());
    for (int64_t i = 0; i < n; ++i) in.keys.push_back(std::to_string(i));
  }
  const int64_t n = static_cast<int64_t>(in.keys.size());
  in.features.resize(core::with_batch(n, example_shape));
  std::copy(values.begin(), values.end(), in.features.data());
  return in;
}

// What a line of the output holds for this model: the predicted class and each class's
// probability (named when the model names its classes), or a regression model's values.
class PredictionColumns {
 public:
  explicit PredictionColumns(const core::SavedModel& saved)
      : outputs_(saved.model->num_outputs()), regression_(saved.spec.regression()),
        names_(int64_t(saved.file.class_names.size()) == outputs_ ? &saved.file.class_names
                                                                  : nullptr) {}

  void header(std::FILE* out) const {
    std::fprintf(out, regression_ ? "key" : "key,predicted");
    for (int64_t c = 0; c < outputs_; ++c)
      if (regression_) std::fprintf(out, ",y%lld", (long long)c);
      else if (names_) std::fprintf(out, ",p_%s", (*names_)[size_t(c)].c_str());
      else std::fprintf(out, ",p%lld", (long long)c);
    std::fputc('\n', out);
  }

  void row(std::FILE* out, const std::string& key, const float* values) const {
    std::fputs(key.c_str(), out);
    if (!regression_) {
      const int64_t best = std::max_element(values, values + outputs_) - values;
      if (names_) std::fprintf(out, ",%s", (*names_)[size_t(best)].c_str());
      else std::fprintf(out, ",%lld", (long long)best);
    }
    // Values at full float precision: a regression's outputs are the answer, not a ranking.
    for (int64_t c = 0; c < outputs_; ++c)
      std::fprintf(out, regression_ ? ",%.9g" : ",%.6g", values[c]);
    std::fputc('\n', out);
  }

 private:
  int64_t outputs_;
  bool regression_;
  const std::vector<std::string>* names_;
};

}  // namespace

int run_infer(const InferArgs& args) {
  core::SavedModel saved;
  Inputs in;
  try {
    saved = core::load_saved_model(args.model_path);
    in = read_inputs(args, saved.model->input_shape());
    saved.normalizer.apply(in.features);
  } catch (const core::UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitBadInput;
  }
  std::FILE* out = args.output == "-" ? stdout : std::fopen(args.output.c_str(), "w");
  if (!out) {
    std::fprintf(stderr, "error: cannot write '%s'\n  fix: check the directory exists and is "
                         "writable\n", args.output.c_str());
    return kExitBadInput;
  }
  const int64_t n = in.features.rank() ? in.features.dim(0) : 0;
  const PredictionColumns columns(saved);
  columns.header(out);
  const int64_t batch = args.batch_size;
  core::Tensor x;
  for (int64_t start = 0; start < n; start += batch) {
    const int64_t count = std::min(batch, n - start);
    x.resize(core::with_batch(count, saved.model->input_shape()));
    std::copy(in.features.row(start), in.features.row(start) + count * x.row_size(), x.data());
    const core::Tensor& p = saved.model->predict(x);
    for (int64_t r = 0; r < count; ++r) columns.row(out, in.keys[start + r], p.row(r));
  }
  if (out != stdout) std::fclose(out);
  if (args.output != "-")
    std::fprintf(stderr, "wrote %lld predictions to %s\n", (long long)n, args.output.c_str());
  return kExitSuccess;
}

}  // namespace dtrain::submit
