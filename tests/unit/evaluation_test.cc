// Evaluation metrics, and merge(): partial evaluations combine exactly into the whole.
#include <catch2/catch.hpp>

#include "core/eval/evaluation.h"
#include "core/util/rng.h"

namespace dtrain {

TEST_CASE("metrics on a hand-checked example") {
  core::Evaluation e(3, 2);
  core::Tensor p({4, 3});
  const float rows[4][3] = {{0.7f, 0.2f, 0.1f}, {0.1f, 0.6f, 0.3f}, {0.5f, 0.3f, 0.2f},
                            {0.2f, 0.3f, 0.5f}};
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 3; ++c) p[r * 3 + c] = rows[r][c];
  const int32_t labels[4] = {0, 1, 1, 0};  // predictions: 0, 1, 0, 2
  e.add(p, labels);
  CHECK(e.accuracy() == Approx(0.5));
  CHECK(e.confusion(1, 0) == 1);
  CHECK(e.confusion(0, 2) == 1);
  CHECK(e.precision(0) == Approx(0.5));  // predicted 0 twice, once right
  CHECK(e.recall(1) == Approx(0.5));
  CHECK(e.f1(0) == Approx(0.5));
  CHECK(e.precision(2) == 0.0);
  CHECK(e.top_n_accuracy() == Approx(0.75));  // row 3: label 0 is third-ranked
}

TEST_CASE("merge of shard evaluations equals evaluation of the whole") {
  core::Rng rng(3);
  const int n = 500, k = 7;
  core::Tensor p({n, k});
  std::vector<int32_t> labels(n);
  for (int i = 0; i < n * k; ++i) p[i] = rng.uniform(0, 1);
  for (int i = 0; i < n; ++i) labels[i] = static_cast<int32_t>(rng.next() % k);
  core::Evaluation whole(k, 3);
  whole.add(p, labels.data());
  core::Evaluation merged;
  for (int start = 0; start < n; start += 123) {
    const int count = std::min(123, n - start);
    core::Tensor part({count, k});
    std::copy(p.row(start), p.row(start) + count * k, part.data());
    core::Evaluation e(k, 3);
    e.add(part, labels.data() + start);
    // Ship through raw counts, as workers of a cluster do.
    merged.merge(core::Evaluation::from_counts(e.counts(), e.loss_sum()));
  }
  CHECK(merged.count() == whole.count());
  CHECK(merged.counts() == whole.counts());
  CHECK(merged.accuracy() == whole.accuracy());
  CHECK(merged.macro_f1() == whole.macro_f1());
  CHECK(merged.top_n_accuracy() == whole.top_n_accuracy());
}

}  // namespace dtrain
