#include "core/eval/evaluation.h"

#include <algorithm>
#include <cstdio>

#include "core/util/check.h"

namespace dtrain::core {

Evaluation::Evaluation(int64_t num_classes, int64_t top_n)
    : classes_(num_classes), top_n_(std::max<int64_t>(1, std::min(top_n, num_classes))),
      confusion_(static_cast<size_t>(num_classes * num_classes), 0) {}

Evaluation Evaluation::regression(int64_t columns) {
  Evaluation e;
  e.regression_ = RegressionEvaluation(columns);
  return e;
}

Evaluation Evaluation::from_regression(const RegressionEvaluation& sums, double loss_sum) {
  Evaluation e;
  e.regression_ = sums;
  e.count_ = sums.count();
  e.loss_sum_ = loss_sum;
  return e;
}

void Evaluation::add_values(const Tensor& predictions, const Tensor& targets) {
  DTRAIN_CHECK(is_regression() && predictions.row_size() == regression_.columns() &&
               targets.row_size() == regression_.columns() &&
               predictions.dim(0) == targets.dim(0))
      << "regression evaluation of " << regression_.columns() << " columns got predictions of "
      << predictions.row_size() << " and targets of " << targets.row_size();
  regression_.add(predictions.data(), targets.data(), predictions.dim(0));
  count_ += predictions.dim(0);
}

void Evaluation::add(const Tensor& p, const int32_t* labels) {
  DTRAIN_CHECK(p.row_size() == classes_) << "probabilities have " << p.row_size()
                                         << " columns, evaluation expects " << classes_;
  const int64_t batch = p.dim(0);
  for (int64_t r = 0; r < batch; ++r) {
    const float* row = p.row(r);
    const int64_t predicted = std::max_element(row, row + classes_) - row;
    const int32_t actual = labels[r];
    DTRAIN_CHECK(actual >= 0 && actual < classes_) << "label " << actual;
    confusion_[actual * classes_ + predicted] += 1;
    // Top-N: the true class is among the N largest when fewer than N classes beat it
    // (ties counted in its favour).
    int64_t better = 0;
    for (int64_t c = 0; c < classes_; ++c) better += row[c] > row[actual];
    top_n_hits_ += better < top_n_;
  }
  count_ += batch;
}

void Evaluation::merge(const Evaluation& other) {
  if (classes_ == 0 && !is_regression()) {
    *this = other;
    return;
  }
  if (is_regression()) {
    DTRAIN_CHECK(other.regression_.columns() == regression_.columns())
        << "merging regression evaluations of different widths";
    regression_.merge(other.regression_);
    count_ += other.count_;
    loss_sum_ += other.loss_sum_;
    return;
  }
  DTRAIN_CHECK(other.classes_ == classes_ && other.top_n_ == top_n_)
      << "merging evaluations of different shapes";
  for (size_t i = 0; i < confusion_.size(); ++i) confusion_[i] += other.confusion_[i];
  count_ += other.count_;
  top_n_hits_ += other.top_n_hits_;
  loss_sum_ += other.loss_sum_;
}

double Evaluation::accuracy() const {
  if (is_regression()) return -1.0;
  int64_t correct = 0;
  for (int64_t c = 0; c < classes_; ++c) correct += confusion(c, c);
  return count_ ? double(correct) / count_ : 0.0;
}

double Evaluation::top_n_accuracy() const { return count_ ? double(top_n_hits_) / count_ : 0.0; }

double Evaluation::precision(int64_t c) const {
  int64_t predicted = 0;
  for (int64_t a = 0; a < classes_; ++a) predicted += confusion(a, c);
  return predicted ? double(confusion(c, c)) / predicted : 0.0;
}

double Evaluation::recall(int64_t c) const {
  int64_t actual = 0;
  for (int64_t p = 0; p < classes_; ++p) actual += confusion(c, p);
  return actual ? double(confusion(c, c)) / actual : 0.0;
}

double Evaluation::f1(int64_t c) const {
  const double p = precision(c), r = recall(c);
  return p + r > 0 ? 2 * p * r / (p + r) : 0.0;
}

double Evaluation::macro_f1() const {
  double sum = 0.0;
  for (int64_t c = 0; c < classes_; ++c) sum += f1(c);
  return classes_ ? sum / classes_ : 0.0;
}

std::string Evaluation::summary() const {
  char text[96];
  if (!is_regression()) {
    std::snprintf(text, sizeof text, "accuracy %.4f, top-%lld %.4f, loss %.4f", accuracy(),
                  (long long)top_n_, top_n_accuracy(), mean_loss());
    return text;
  }
  std::snprintf(text, sizeof text, "loss %.4g, R\u00b2", mean_loss());
  std::string out = text;
  for (int64_t c = 0; c < regression_.columns() && c < 8; ++c) {
    std::snprintf(text, sizeof text, "%s %.4f", c ? "," : "", regression_.r2(c));
    out += text;
  }
  if (regression_.columns() > 8) out += ", ...";
  return out;
}

std::string Evaluation::report() const {
  std::string out;
  char line[256];
  if (is_regression()) {
    std::snprintf(line, sizeof line, "examples: %lld  loss (mean squared error): %.6g\n",
                  (long long)count_, mean_loss());
    return line + regression_.report();
  }
  std::snprintf(line, sizeof line, "examples: %lld  accuracy: %.4f  top-%lld accuracy: %.4f  "
                "macro F1: %.4f  loss: %.4f\n",
                (long long)count_, accuracy(), (long long)top_n_, top_n_accuracy(), macro_f1(),
                mean_loss());
  out += line;
  out += "class  precision  recall  f1      count\n";
  for (int64_t c = 0; c < classes_; ++c) {
    int64_t actual = 0;
    for (int64_t p = 0; p < classes_; ++p) actual += confusion(c, p);
    std::snprintf(line, sizeof line, "%5lld  %9.4f  %6.4f  %6.4f  %5lld\n", (long long)c,
                  precision(c), recall(c), f1(c), (long long)actual);
    out += line;
  }
  out += "confusion matrix (rows: actual, columns: predicted)\n";
  for (int64_t a = 0; a < classes_; ++a) {
    for (int64_t p = 0; p < classes_; ++p) {
      std::snprintf(line, sizeof line, "%6lld", (long long)confusion(a, p));
      out += line;
    }
    out += "\n";
  }
  return out;
}

std::vector<int64_t> Evaluation::counts() const {
  std::vector<int64_t> c = {classes_, top_n_, count_, top_n_hits_};
  c.insert(c.end(), confusion_.begin(), confusion_.end());
  return c;
}

Evaluation Evaluation::from_counts(const std::vector<int64_t>& c, double loss_sum) {
  DTRAIN_CHECK(c.size() >= 4 && c.size() == 4 + size_t(c[0] * c[0])) << "bad evaluation counts";
  Evaluation e(c[0], c[1]);
  e.count_ = c[2];
  e.top_n_hits_ = c[3];
  std::copy(c.begin() + 4, c.end(), e.confusion_.begin());
  e.loss_sum_ = loss_sum;
  return e;
}

}  // namespace dtrain::core
