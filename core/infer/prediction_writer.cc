#include "core/infer/prediction_writer.h"

#include <algorithm>

namespace dtrain::core {

PredictionWriter::PredictionWriter(const SavedModel& saved)
    : outputs_(saved.model->num_outputs()), regression_(saved.spec.regression()),
      names_(int64_t(saved.file.class_names.size()) == outputs_ ? &saved.file.class_names
                                                                : nullptr) {}

std::string PredictionWriter::header() const {
  std::string out = regression_ ? "key" : "key,predicted";
  for (int64_t c = 0; c < outputs_; ++c)
    out += regression_ ? ",y" + std::to_string(c)
           : names_    ? ",p_" + (*names_)[size_t(c)]
                       : ",p" + std::to_string(c);
  return out + "\n";
}

void PredictionWriter::row(std::FILE* out, const std::string& key, const float* values) const {
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

void PredictionWriter::write(Model& model, const KeyedExamples& in, int64_t begin, int64_t end,
                             int64_t batch, std::FILE* out) const {
  Tensor x;
  for (int64_t start = begin; start < end; start += batch) {
    const int64_t count = std::min(batch, end - start);
    x.resize(with_batch(count, model.input_shape()));
    std::copy(in.features.row(start), in.features.row(start) + count * x.row_size(), x.data());
    const Tensor& p = model.predict(x);
    for (int64_t r = 0; r < count; ++r) row(out, in.keys[size_t(start + r)], p.row(r));
  }
}

}  // namespace dtrain::core
