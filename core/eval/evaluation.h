#pragma once
// Classification metrics from a confusion matrix plus top-N hits. merge() adds counts, so
// evaluations computed on disjoint shards by many workers combine exactly.
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor/tensor.h"

namespace dtrain::core {

class Evaluation {
 public:
  Evaluation() = default;
  Evaluation(int64_t num_classes, int64_t top_n);

  // probabilities [batch, classes]; labels [batch].
  void add(const Tensor& probabilities, const int32_t* labels);
  void merge(const Evaluation& other);

  int64_t count() const { return count_; }
  int64_t num_classes() const { return classes_; }
  int64_t top_n() const { return top_n_; }
  double accuracy() const;
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

  // Human-readable report: accuracy, top-N, per-class precision/recall/F1, confusion matrix.
  std::string report() const;

  // Raw counts for shipping between processes.
  std::vector<int64_t> counts() const;
  static Evaluation from_counts(const std::vector<int64_t>& counts, double loss_sum);

 private:
  int64_t classes_ = 0, top_n_ = 1, count_ = 0, top_n_hits_ = 0;
  double loss_sum_ = 0.0;
  std::vector<int64_t> confusion_;
};

}  // namespace dtrain::core
