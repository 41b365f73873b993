#include "core/eval/regression_evaluation.h"

#include <cmath>
#include <cstdio>
#include <limits>

namespace dtrain::core {

void RegressionEvaluation::add(const float* predictions, const float* targets, int64_t rows) {
  const int64_t k = columns();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < k; ++c) {
      const double y = targets[r * k + c], e = double(predictions[r * k + c]) - y;
      Sums& s = sums_[size_t(c)];
      s.squared_error += e * e;
      s.absolute_error += std::fabs(e);
      s.target += y;
      s.target_squared += y * y;
    }
  count_ += rows;
}

void RegressionEvaluation::merge(const RegressionEvaluation& other) {
  if (sums_.empty()) sums_.resize(other.sums_.size());
  for (size_t c = 0; c < sums_.size() && c < other.sums_.size(); ++c) {
    sums_[c].squared_error += other.sums_[c].squared_error;
    sums_[c].absolute_error += other.sums_[c].absolute_error;
    sums_[c].target += other.sums_[c].target;
    sums_[c].target_squared += other.sums_[c].target_squared;
  }
  count_ += other.count_;
}

double RegressionEvaluation::mse(int64_t c) const {
  return count_ ? sums_[size_t(c)].squared_error / double(count_) : 0.0;
}
double RegressionEvaluation::mae(int64_t c) const {
  return count_ ? sums_[size_t(c)].absolute_error / double(count_) : 0.0;
}
double RegressionEvaluation::rmse(int64_t c) const { return std::sqrt(mse(c)); }

double RegressionEvaluation::r2(int64_t c) const {
  const Sums& s = sums_[size_t(c)];
  const double n = double(count_);
  const double total = n > 0 ? s.target_squared - s.target * s.target / n : 0.0;
  if (!(total > 0)) return std::numeric_limits<double>::quiet_NaN();
  return 1.0 - s.squared_error / total;
}

std::vector<double> RegressionEvaluation::sums() const {
  std::vector<double> out = {double(columns()), double(count_)};
  for (const Sums& s : sums_)
    out.insert(out.end(), {s.squared_error, s.absolute_error, s.target, s.target_squared});
  return out;
}

std::optional<RegressionEvaluation> RegressionEvaluation::from_sums(const std::vector<double>& v) {
  // Sent by a node: bounded before anything is sized by it (at most 2^24 columns, as a layer).
  if (v.size() < 2 || !(v[0] >= 1 && v[0] <= double(1 << 24)) || v[0] != std::floor(v[0]) ||
      v.size() != 2 + 4 * size_t(v[0]) || !(v[1] >= 0 && v[1] <= 9e15) || v[1] != std::floor(v[1]))
    return std::nullopt;
  for (double x : v)
    if (!std::isfinite(x)) return std::nullopt;
  RegressionEvaluation r(static_cast<int64_t>(v[0]));
  r.count_ = int64_t(v[1]);
  for (size_t c = 0; c < r.sums_.size(); ++c)
    r.sums_[c] = {v[2 + 4 * c], v[3 + 4 * c], v[4 + 4 * c], v[5 + 4 * c]};
  return r;
}

std::string RegressionEvaluation::report() const {
  std::string out = "examples: " + std::to_string(count_) + "\ncolumn  mse          mae          rmse         r2\n";
  char line[128];
  for (int64_t c = 0; c < columns(); ++c) {
    std::snprintf(line, sizeof line, "%6lld  %-11.6g  %-11.6g  %-11.6g  %.6f\n", (long long)c,
                  mse(c), mae(c), rmse(c), r2(c));
    out += line;
  }
  return out;
}

}  // namespace dtrain::core
