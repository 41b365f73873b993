// ROC/AUC and regression metrics (core/eval/roc.h, regression_evaluation.h) against references
// computed here another way: hand-worked cases, every (positive, negative) pair, the trapezoids
// of the curve, two-pass sums; and merged parts against the whole.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/eval/evaluation.h"
#include "core/eval/regression_evaluation.h"
#include "core/eval/roc.h"
#include "core/util/rng.h"

namespace dtrain {
namespace {

// The fraction of (positive, negative) pairs the positive wins, ties one half: O(n^2).
double pairwise_auc(const std::vector<float>& s, const std::vector<bool>& p) {
  double wins = 0, pairs = 0;
  for (size_t i = 0; i < s.size(); ++i)
    for (size_t j = 0; j < s.size(); ++j)
      if (p[i] && !p[j]) {
        pairs += 1;
        wins += s[i] > s[j] ? 1.0 : s[i] == s[j] ? 0.5 : 0.0;
      }
  return wins / pairs;
}

double trapezoid_auc(const std::vector<core::Roc::Point>& curve) {
  double area = 0;
  for (size_t i = 1; i < curve.size(); ++i)
    area += (curve[i].fpr - curve[i - 1].fpr) * (curve[i].tpr + curve[i - 1].tpr) / 2;
  return area;
}

}  // namespace

TEST_CASE("AUC of a hand-worked case, of ties, and without one of the classes") {
  core::Roc r;
  // Positives 0.8, 0.4; negatives 0.35, 0.1: 0.8 beats both, 0.4 beats both: 1.0.
  for (auto [s, p] : std::vector<std::pair<float, bool>>{{0.1f, false}, {0.4f, true}, {0.35f, false}, {0.8f, true}})
    r.add(s, p);
  CHECK(r.auc() == 1.0);
  r.add(0.6f, false);  // now 0.4 loses to 0.6: 5 of 6 pairs
  CHECK(r.auc() == Approx(5.0 / 6.0));
  core::Roc ties;
  ties.add(0.5f, true);
  ties.add(0.5f, false);
  CHECK(ties.auc() == 0.5);
  core::Roc one_class;
  one_class.add(0.3f, true);
  CHECK(std::isnan(one_class.auc()));
  // The curve: from (0, 0) to (1, 1), thresholds falling.
  const auto c = r.curve();
  CHECK(c.front().fpr == 0);
  CHECK(c.front().tpr == 0);
  CHECK(c.back().fpr == 1);
  CHECK(c.back().tpr == 1);
  CHECK(r.curve_csv().rfind("threshold,fpr,tpr\ninf,0,0\n0.800000012,0,0.5\n", 0) == 0);
}

TEST_CASE("AUC on random scores equals the pairwise count and the curve's trapezoids") {
  core::Rng rng(17);
  std::vector<float> scores;
  std::vector<bool> positive;
  core::Roc whole, part_a, part_b;
  for (int i = 0; i < 700; ++i) {
    const bool p = rng.uniform(0, 1) < 0.3f;
    // Positives score higher on average; rounding to 0.01 makes many ties.
    const float s = std::round((rng.uniform(0, 1) + (p ? 0.3f : 0.0f)) * 100) / 100;
    scores.push_back(s);
    positive.push_back(p);
    whole.add(s, p);
    (i % 3 ? part_a : part_b).add(s, p);
  }
  const double reference = pairwise_auc(scores, positive);
  CHECK(whole.auc() == Approx(reference).epsilon(1e-12));
  CHECK(trapezoid_auc(whole.curve()) == Approx(reference).epsilon(1e-12));
  part_a.merge(part_b);
  CHECK(part_a.auc() == Approx(whole.auc()).epsilon(1e-15));
  CHECK(reference > 0.6);
}

TEST_CASE("one-vs-all ROC from softmax rows") {
  core::RocOneVsAll roc(3);
  const float p[] = {0.7f, 0.2f, 0.1f, 0.1f, 0.8f, 0.1f, 0.2f, 0.3f, 0.5f, 0.6f, 0.3f, 0.1f};
  const int32_t labels[] = {0, 1, 2, 1};
  roc.add(p, labels, 4);
  CHECK(roc.of(2).auc() == 1.0);  // class 2's only positive has its highest score
  CHECK(roc.of(0).auc() == Approx(1.0));  // 0.7 vs 0.1, 0.2, 0.6
  CHECK(roc.of(1).auc() == Approx(0.875));  // 0.8 and 0.3 vs 0.2 and 0.3: (1 + 1 + 1 + 0.5) / 4
  CHECK(roc.macro_auc() == Approx((1.0 + 0.875 + 1.0) / 3));
}

TEST_CASE("regression metrics per column against two-pass references; merged parts exact") {
  core::Rng rng(5);
  const int64_t rows = 500, cols = 2;
  std::vector<float> y(rows * cols), pred(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) {
    y[size_t(i)] = rng.uniform(-3, 5) + (i % 2) * 10;
    pred[size_t(i)] = y[size_t(i)] + rng.uniform(-0.5f, 0.5f);
  }
  core::RegressionEvaluation whole(cols), a(cols), b(cols);
  whole.add(pred.data(), y.data(), rows);
  a.add(pred.data(), y.data(), 200);
  b.add(pred.data() + 200 * cols, y.data() + 200 * cols, rows - 200);
  a.merge(b);
  for (int64_t c = 0; c < cols; ++c) {
    double mean = 0;
    for (int64_t r = 0; r < rows; ++r) mean += y[size_t(r * cols + c)];
    mean /= rows;
    double sse = 0, sae = 0, sst = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const double e = double(pred[size_t(r * cols + c)]) - y[size_t(r * cols + c)];
      sse += e * e;
      sae += std::fabs(e);
      sst += (y[size_t(r * cols + c)] - mean) * (y[size_t(r * cols + c)] - mean);
    }
    CHECK(whole.mse(c) == Approx(sse / rows).epsilon(1e-12));
    CHECK(whole.mae(c) == Approx(sae / rows).epsilon(1e-12));
    CHECK(whole.rmse(c) == Approx(std::sqrt(sse / rows)).epsilon(1e-12));
    CHECK(whole.r2(c) == Approx(1 - sse / sst).epsilon(1e-9));
    CHECK(whole.r2(c) > 0.9);
    CHECK(a.mse(c) == Approx(whole.mse(c)).epsilon(1e-14));
    CHECK(a.r2(c) == Approx(whole.r2(c)).epsilon(1e-12));
  }
  CHECK(a.count() == rows);
  core::RegressionEvaluation flat(1);
  const float same[] = {2, 2, 2};
  flat.add(same, same, 3);
  CHECK(std::isnan(flat.r2(0)));  // targets that do not vary
  CHECK(flat.mse(0) == 0);
}

TEST_CASE("a regression Evaluation ships its sums, merges parts exactly and refuses bad ones") {
  core::Rng rng(11);
  const int64_t rows = 300, cols = 2;
  core::Tensor pred({rows, cols}), y({rows, cols});
  for (int64_t i = 0; i < rows * cols; ++i) {
    y[i] = rng.normal(0.0f, 1.0f);
    pred[i] = y[i] + 0.1f * rng.normal(0.0f, 1.0f);
  }
  auto part = [&](int64_t begin, int64_t end) {
    core::Tensor p({end - begin, cols}), t({end - begin, cols});
    std::copy(pred.row(begin), pred.row(end), p.data());
    std::copy(y.row(begin), y.row(end), t.data());
    core::Evaluation e = core::Evaluation::regression(cols);
    e.add_values(p, t);
    e.add_loss(0.5, end - begin);
    return e;
  };
  const core::Evaluation whole = part(0, rows);
  CHECK(whole.is_regression());
  CHECK(whole.accuracy() == -1.0);  // no accuracy: progress and divergence checks leave it out
  CHECK_THAT(whole.report(), Catch::Contains("r2"));
  CHECK_THAT(whole.summary(), Catch::StartsWith("loss 0.5"));
  // As the controller merges a cluster job's parts: through the shipped sums.
  core::Evaluation merged;
  for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 120}, {120, 121}, {121, rows}}) {
    const core::Evaluation p = part(b, e);
    auto sums = core::RegressionEvaluation::from_sums(p.regression_metrics().sums());
    REQUIRE(sums.has_value());
    merged.merge(core::Evaluation::from_regression(*sums, p.loss_sum()));
  }
  CHECK(merged.count() == rows);
  CHECK(merged.mean_loss() == Approx(0.5).epsilon(1e-12));
  for (int64_t c = 0; c < cols; ++c) {
    CHECK(merged.regression_metrics().mse(c) == Approx(whole.regression_metrics().mse(c)).epsilon(1e-12));
    CHECK(merged.regression_metrics().r2(c) == Approx(whole.regression_metrics().r2(c)).epsilon(1e-12));
  }
  // From a node: a wrong length, a count that is not whole, a huge width, a NaN are refused.
  std::vector<double> good = whole.regression_metrics().sums();
  for (auto bad : {std::vector<double>{}, std::vector<double>{2, 10, 1, 1, 1}, std::vector<double>{1e12, 1},
                   std::vector<double>{1, 2.5, 0, 0, 0, 0}, std::vector<double>{1, 2, NAN, 0, 0, 0},
                   std::vector<double>{-1, 2}})
    CHECK_FALSE(core::RegressionEvaluation::from_sums(bad).has_value());
  CHECK(core::RegressionEvaluation::from_sums(good).has_value());
}

}  // namespace dtrain
