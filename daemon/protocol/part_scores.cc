#include "daemon/protocol/part_scores.h"

#include <cstring>

#include "transport/security/base64.h"

namespace dtrain::daemon {
namespace {

// Exactly `bytes` bytes from `text`, or false.
bool from_base64(const Json& text, void* out, size_t bytes) {
  if (!text.is_string()) return false;
  const auto got = transport::from_base64(text.get_ref<const std::string&>(), out, bytes);
  return got && *got == bytes;
}

}  // namespace

EvaluationCounts evaluation_counts(const core::Evaluation& e) {
  EvaluationCounts counts;
  counts.loss_sum = e.loss_sum();
  counts.regression = e.is_regression();
  if (counts.regression) counts.regression_sums = e.regression_metrics().sums();
  else counts.counts = e.counts();
  return counts;
}

PartScores part_scores(const core::RocOneVsAll& roc) {
  return {roc.rows(), roc.classes(), roc.probabilities(), roc.labels()};
}

std::optional<core::RocOneVsAll> decode_part_scores(const Json& s, int64_t rows, int64_t classes) {
  if (!s.is_object() || s.value("rows", int64_t(-1)) != rows ||
      s.value("classes", int64_t(-1)) != classes || rows < 0 || classes < 1 ||
      uint64_t(rows) * uint64_t(classes) * sizeof(float) > kMaxPartScoreBytes)
    return std::nullopt;
  std::vector<float> p(static_cast<size_t>(rows * classes));
  std::vector<int32_t> labels(static_cast<size_t>(rows));
  if (!from_base64(s["probabilities"], p.data(), p.size() * sizeof(float)) ||
      !from_base64(s["labels"], labels.data(), labels.size() * sizeof(int32_t)))
    return std::nullopt;
  for (int32_t l : labels)
    if (l < 0 || l >= classes) return std::nullopt;
  core::RocOneVsAll roc(classes);
  roc.add(p.data(), labels.data(), rows);
  return roc;
}

}  // namespace dtrain::daemon
