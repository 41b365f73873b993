#pragma once
// ROC curves and their AUC (docs/user-guide.md, "dtrain-submit": `eval --metrics
// classification,roc`) for a binary score, and one against all for each class of a softmax. Every
// (score, positive) pair is kept, so the AUC is exact (ties count one half, as the Mann-Whitney
// statistic does) and merge() of the parts of a data set gives exactly the whole's.
#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::core {

class Roc {
 public:
  void add(float score, bool positive) { points_.push_back({score, positive}); }
  void merge(const Roc& other) { points_.insert(points_.end(), other.points_.begin(), other.points_.end()); }
  int64_t count() const { return int64_t(points_.size()); }
  int64_t positives() const;

  // The area under the curve; NaN without both a positive and a negative.
  double auc() const;

  struct Point {
    double threshold = 0;  // predicted positive when score >= threshold
    double fpr = 0, tpr = 0;
  };
  // From (0, 0) to (1, 1), one point per distinct score, thresholds falling.
  std::vector<Point> curve() const;
  // "threshold,fpr,tpr" and one line per point of curve().
  std::string curve_csv() const;

 private:
  struct Scored {
    float score;
    bool positive;
  };
  std::vector<Scored> points_;
  friend class RocOneVsAll;
};

// One Roc per class, class c positive against the rest, from softmax outputs.
class RocOneVsAll {
 public:
  explicit RocOneVsAll(int64_t classes = 0) : per_class_(size_t(classes)) {}
  // probabilities [rows, classes] row-major; labels [rows].
  void add(const float* probabilities, const int32_t* labels, int64_t rows);
  void merge(const RocOneVsAll& other);
  const Roc& of(int64_t c) const { return per_class_[size_t(c)]; }
  int64_t classes() const { return int64_t(per_class_.size()); }
  double macro_auc() const;  // the mean over classes with both positives and negatives

  // The rows added so far, as given: probabilities [rows, classes] row-major and labels. What
  // a node ships for a cluster evaluation; add() of them rebuilds this exactly.
  int64_t rows() const { return per_class_.empty() ? 0 : per_class_[0].count(); }
  std::vector<float> probabilities() const;
  std::vector<int32_t> labels() const;
  // "class,threshold,fpr,tpr" and every class's curve, the class named by `names[c]` (or c).
  std::string curves_csv(const std::vector<std::string>& names) const;

 private:
  std::vector<Roc> per_class_;
};

}  // namespace dtrain::core
