#pragma once
// A model's metrics on labelled data: classification (a confusion matrix plus top-N hits), or
// regression (core/eval/regression_evaluation.h) for a model that predicts values. merge()
// adds counts and sums, so evaluations computed on disjoint shards by many workers combine
// exactly.
#include <cstdint>
#include <string>
#include <vector>

#include "core/eval/regression_evaluation.h"
#include "core/tensor/tensor.h"

namespace dtrain::core {

class Evaluation {
 public:
  Evaluation() = default;
  Evaluation(int64_t num_classes, int64_t top_n);

  static Evaluation regression(int64_t columns);
  bool is_regression() const { return regression_.columns() > 0; }
  const RegressionEvaluation& regression_metrics() const { return regression_; }

  // probabilities [batch, classes]; labels [batch].
  void add(const Tensor& probabilities, const int32_t* labels);
  // Regression: predictions and targets [batch, columns].
  void add_values(const Tensor& predictions, const Tensor& targets);
  void merge(const Evaluation& other);

  int64_t count() const { return count_; }
  int64_t num_classes() const { return classes_; }
  int64_t top_n() const { return top_n_; }
  double accuracy() const;  // -1 for a regression model: it has none
  double top_n_accuracy() const;
  double precision(int64_t c) const;
  double recall(int64_t c) const;
  double f1(int64_t c) const;
  double macro_f1() const;
  // confusion(actual, predicted)
  int64_t confusion(int64_t actual, int64_t predicted) const {
    return confusion_[actual * classes_ + predicted];
  }
  double loss_sum() const { return loss_sum_; }
  void add_loss(double batch_mean_loss, int64_t batch) { loss_sum_ += batch_mean_loss * batch; }
  double mean_loss() const { return count_ ? loss_sum_ / count_ : 0.0; }

  // One line for progress output: "accuracy 0.8726, top-5 0.9901, loss 0.3612", or for a
  // regression model "loss 0.0123, R² 0.9812" (R² of each target column).
  std::string summary() const;
  // Human-readable report: accuracy, top-N, per-class precision/recall/F1, confusion matrix.
  std::string report() const;

  // Raw counts for shipping between processes (classification; regression ships
  // regression_metrics().sums()).
  std::vector<int64_t> counts() const;
  static Evaluation from_counts(const std::vector<int64_t>& counts, double loss_sum);
  static Evaluation from_regression(const RegressionEvaluation& sums, double loss_sum);

 private:
  int64_t classes_ = 0, top_n_ = 1, count_ = 0, top_n_hits_ = 0;
  double loss_sum_ = 0.0;
  std::vector<int64_t> confusion_;
  RegressionEvaluation regression_;
};

}  // namespace dtrain::core
