// Early stopping (core/train/early_stopping.h) on crafted evaluations: it stops at the
// evaluation that exhausts the patience, never earlier, and names the best epoch (the model the
// trainer keeps); min_delta decides what counts as an improvement; loss is lower-is-better.
#include <catch2/catch.hpp>

#include "core/eval/evaluation.h"
#include "core/train/early_stopping.h"

namespace dtrain {
namespace {

// A two-class evaluation of 100 examples with `correct` right (all on the diagonal of class 0)
// and a mean loss of `loss`.
core::Evaluation eval(int64_t correct, double loss = 1.0) {
  return core::Evaluation::from_counts({2, 1, 100, correct, correct, 100 - correct, 0, 0},
                                       loss * 100);
}

core::EarlyStoppingSpec spec(const std::string& metric, int64_t patience, double min_delta) {
  core::EarlyStoppingSpec s;
  s.enabled = true;
  s.metric = metric;
  s.patience = patience;
  s.min_delta = min_delta;
  return s;
}

}  // namespace

TEST_CASE("early stopping on accuracy stops when the patience runs out, keeping the best") {
  core::EarlyStopping e(spec("accuracy", 2, 0.0));
  CHECK(e.observe(0, eval(50)));  // the first is the best so far
  CHECK(e.observe(1, eval(70)));
  CHECK_FALSE(e.observe(2, eval(70)));  // equal is no improvement
  CHECK_FALSE(e.should_stop());         // one of two
  CHECK(e.observe(3, eval(71)));        // the wait starts over
  CHECK_FALSE(e.observe(4, eval(60)));
  CHECK_FALSE(e.should_stop());
  CHECK_FALSE(e.observe(5, eval(69)));
  CHECK(e.should_stop());  // two evaluations without improvement after epoch 4 (0-based 3)
  CHECK(e.best_epoch() == 3);
  CHECK(e.best() == Approx(0.71));
  CHECK_THAT(e.reason(), Catch::Contains("after epoch 6") && Catch::Contains("epoch 4's") &&
                             Catch::Contains("accuracy 0.710000"));
}

TEST_CASE("min_delta: a gain no larger than it is no improvement") {
  core::EarlyStopping e(spec("accuracy", 1, 0.05));
  CHECK(e.observe(0, eval(50)));
  CHECK_FALSE(e.observe(1, eval(55)));  // +0.05 is not more than 0.05
  CHECK(e.should_stop());
  CHECK(e.best_epoch() == 0);
}

TEST_CASE("on loss, lower is better") {
  core::EarlyStopping e(spec("loss", 1, 0.0));
  CHECK(e.observe(0, eval(50, 0.9)));
  CHECK(e.observe(1, eval(40, 0.7)));  // accuracy fell, loss improved: it counts
  CHECK_FALSE(e.observe(2, eval(90, 0.8)));
  CHECK(e.should_stop());
  CHECK(e.best_epoch() == 1);
  CHECK(e.best() == Approx(0.7));
}

}  // namespace dtrain
