#include "core/eval/roc.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace dtrain::core {

int64_t Roc::positives() const {
  int64_t p = 0;
  for (const Scored& s : points_) p += s.positive;
  return p;
}

// Mann-Whitney: the chance that a random positive scores above a random negative, ties one half.
// Sorting by score and walking groups of equal scores counts it in O(n log n).
double Roc::auc() const {
  const int64_t pos = positives(), neg = count() - pos;
  if (pos == 0 || neg == 0) return std::numeric_limits<double>::quiet_NaN();
  std::vector<Scored> sorted = points_;
  std::sort(sorted.begin(), sorted.end(), [](const Scored& a, const Scored& b) { return a.score < b.score; });
  double wins = 0;       // positive above negative, ties 1/2
  int64_t below_neg = 0;  // negatives with a lower score than the current group
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    int64_t group_pos = 0, group_neg = 0;
    for (; j < sorted.size() && sorted[j].score == sorted[i].score; ++j)
      (sorted[j].positive ? group_pos : group_neg) += 1;
    wins += double(group_pos) * (double(below_neg) + 0.5 * double(group_neg));
    below_neg += group_neg;
    i = j;
  }
  return wins / (double(pos) * double(neg));
}

std::vector<Roc::Point> Roc::curve() const {
  const int64_t pos = positives(), neg = count() - pos;
  std::vector<Scored> sorted = points_;
  std::sort(sorted.begin(), sorted.end(), [](const Scored& a, const Scored& b) { return a.score > b.score; });
  std::vector<Point> out{{std::numeric_limits<double>::infinity(), 0, 0}};
  int64_t tp = 0, fp = 0;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    for (; j < sorted.size() && sorted[j].score == sorted[i].score; ++j)
      (sorted[j].positive ? tp : fp) += 1;
    out.push_back({sorted[i].score, neg ? double(fp) / double(neg) : 0.0,
                   pos ? double(tp) / double(pos) : 0.0});
    i = j;
  }
  return out;
}

std::string Roc::curve_csv() const {
  std::string s = "threshold,fpr,tpr\n";
  char line[96];
  for (const Point& p : curve()) {
    std::snprintf(line, sizeof line, "%.9g,%.9g,%.9g\n", p.threshold, p.fpr, p.tpr);
    s += line;
  }
  return s;
}

void RocOneVsAll::add(const float* probabilities, const int32_t* labels, int64_t rows) {
  const int64_t k = classes();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < k; ++c) per_class_[size_t(c)].add(probabilities[r * k + c], labels[r] == c);
}

void RocOneVsAll::merge(const RocOneVsAll& other) {
  if (per_class_.empty()) per_class_.resize(other.per_class_.size());
  for (size_t c = 0; c < per_class_.size() && c < other.per_class_.size(); ++c)
    per_class_[c].merge(other.per_class_[c]);
}

std::vector<float> RocOneVsAll::probabilities() const {
  const int64_t n = rows(), k = classes();
  std::vector<float> out(size_t(n * k));
  for (int64_t c = 0; c < k; ++c)
    for (int64_t r = 0; r < n; ++r) out[size_t(r * k + c)] = per_class_[size_t(c)].points_[size_t(r)].score;
  return out;
}

std::vector<int32_t> RocOneVsAll::labels() const {
  std::vector<int32_t> out(size_t(rows()), -1);
  for (int64_t c = 0; c < classes(); ++c)
    for (size_t r = 0; r < out.size(); ++r)
      if (per_class_[size_t(c)].points_[r].positive) out[r] = int32_t(c);
  return out;
}

std::string RocOneVsAll::curves_csv(const std::vector<std::string>& names) const {
  std::string out = "class,threshold,fpr,tpr\n";
  char line[96];
  for (int64_t c = 0; c < classes(); ++c) {
    const std::string name = size_t(c) < names.size() ? names[size_t(c)] : std::to_string(c);
    for (const Roc::Point& p : per_class_[size_t(c)].curve()) {
      std::snprintf(line, sizeof line, ",%.9g,%.9g,%.9g\n", p.threshold, p.fpr, p.tpr);
      out += name + line;
    }
  }
  return out;
}

double RocOneVsAll::macro_auc() const {
  double sum = 0;
  int n = 0;
  for (const Roc& r : per_class_) {
    const double a = r.auc();
    if (!std::isnan(a)) sum += a, ++n;
  }
  return n ? sum / n : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace dtrain::core
