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
