#pragma once
// Regression metrics per output column (docs/user-guide.md, "Regression"): MSE, MAE, RMSE and R²,
// from sums that merge() adds, so the parts of a data set evaluated apart combine exactly into the
// whole's.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::core {

class RegressionEvaluation {
 public:
  explicit RegressionEvaluation(int64_t columns = 0) : sums_(size_t(columns)) {}
  // predictions and targets [rows, columns] row-major.
  void add(const float* predictions, const float* targets, int64_t rows);
  void merge(const RegressionEvaluation& other);
  int64_t columns() const { return int64_t(sums_.size()); }
  int64_t count() const { return count_; }
  double mse(int64_t c) const;
  double mae(int64_t c) const;
  double rmse(int64_t c) const;
  // 1 - SSE / SST: 1 is perfect, 0 predicts no better than the targets' mean; NaN when the
  // targets do not vary.
  double r2(int64_t c) const;
  std::string report() const;  // one line per column

  // [columns, count, then per column: squared error, absolute error, target, target²]: what a
  // node ships for the controller to merge. from_sums() refuses (nullopt) a malformed vector.
  std::vector<double> sums() const;
  static std::optional<RegressionEvaluation> from_sums(const std::vector<double>& sums);

 private:
  struct Sums {
    double squared_error = 0, absolute_error = 0, target = 0, target_squared = 0;
  };
  std::vector<Sums> sums_;
  int64_t count_ = 0;
};

}  // namespace dtrain::core
