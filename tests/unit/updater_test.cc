// Updater steps against values computed by hand (two iterations, two parameters).
#include <catch2/catch.hpp>

#include <cmath>

#include "core/updaters/updater.h"

namespace dtrain {
namespace {

core::UpdaterSpec spec_of(const std::string& type, double lr) {
  core::UpdaterSpec s;
  s.type = type;
  s.learning_rate = lr;
  return s;
}

// Segment 0 (param 0) is regularised, segment 1 (param 1) is not, like a weight and a bias.
std::vector<core::ParamSegment> segments() { return {{0, 1, true}, {1, 1, false}}; }

}  // namespace

TEST_CASE("sgd: u = lr * (g + l2 w) on weights only") {
  auto u = core::Updater::create(spec_of("sgd", 0.1), 0.5, segments(), 2);
  float w[2] = {2.0f, 2.0f}, g[2] = {1.0f, 1.0f}, step[2];
  u->compute_step(w, g, step, 0);
  CHECK(step[0] == Approx(0.1 * (1.0 + 0.5 * 2.0)));
  CHECK(step[1] == Approx(0.1));
}

TEST_CASE("nesterovs matches the hand-computed DL4J form") {
  auto spec = spec_of("nesterovs", 0.1);
  spec.momentum = 0.9;
  auto u = core::Updater::create(spec, 0.0, segments(), 2);
  float w[2] = {0, 0}, g[2] = {1.0f, -2.0f}, step[2];
  // t=1: v = -0.1 g; u = 0.9*0 - 1.9*v = 0.19 g
  u->compute_step(w, g, step, 0);
  CHECK(step[0] == Approx(0.19));
  CHECK(step[1] == Approx(-0.38));
  // t=2 with g=1: v_old=-0.1, v_new = 0.9*(-0.1) - 0.1 = -0.19; u = 0.9*(-0.1) + 1.9*0.19 = 0.271
  float g2[2] = {1.0f, 1.0f};
  u->compute_step(w, g2, step, 1);
  CHECK(step[0] == Approx(0.271));
}

TEST_CASE("adam and amsgrad match hand-computed values") {
  auto spec = spec_of("adam", 0.01);
  auto adam = core::Updater::create(spec, 0.0, segments(), 2);
  float w[2] = {0, 0}, g[2] = {0.5f, -0.25f}, step[2];
  // t=1: m = 0.1 g, v = 0.001 g^2, alpha = 0.01 sqrt(0.001)/0.1; u = alpha m/(sqrt(v)+eps) ~ 0.01 sign(g)
  adam->compute_step(w, g, step, 0);
  CHECK(step[0] == Approx(0.01).epsilon(1e-4));
  CHECK(step[1] == Approx(-0.01).epsilon(1e-4));
  // t=2 with g = 0: m = 0.09*0.5 = 0.045, v = 0.999*0.00025 = 0.00024975
  float zero[2] = {0, 0};
  adam->compute_step(w, zero, step, 1);
  const double alpha = 0.01 * std::sqrt(1 - 0.999 * 0.999) / (1 - 0.81);
  CHECK(step[0] == Approx(alpha * 0.045 / (std::sqrt(0.00024975) + 1e-8)).epsilon(1e-4));

  // AMSGrad keeps the larger second moment: with a tiny second gradient its step stays smaller.
  auto ams = core::Updater::create(spec_of("amsgrad", 0.01), 0.0, segments(), 2);
  float big[2] = {1.0f, 1.0f}, tiny[2] = {1e-3f, 1e-3f}, s_ams[2];
  adam = core::Updater::create(spec_of("adam", 0.01), 0.0, segments(), 2);
  ams->compute_step(w, big, s_ams, 0);
  adam->compute_step(w, big, step, 0);
  CHECK(s_ams[0] == Approx(step[0]));
  for (int t = 1; t < 2000; ++t) {
    ams->compute_step(w, tiny, s_ams, t);
    adam->compute_step(w, tiny, step, t);
  }
  CHECK(s_ams[0] < step[0]);
}

TEST_CASE("rmsprop matches hand-computed values") {
  auto u = core::Updater::create(spec_of("rmsprop", 0.01), 0.0, segments(), 2);
  float w[2] = {0, 0}, g[2] = {2.0f, 0.0f}, step[2];
  // s = 0.05 * 4 = 0.2; u = 0.01 * 2 / sqrt(0.2)
  u->compute_step(w, g, step, 0);
  CHECK(step[0] == Approx(0.01 * 2 / std::sqrt(0.2)).epsilon(1e-5));
  CHECK(step[1] == 0.0f);
}

TEST_CASE("learning-rate schedules") {
  auto spec = spec_of("sgd", 0.1);
  spec.schedule.type = core::ScheduleSpec::Type::kStep;
  spec.schedule.decay_rate = 0.5;
  spec.schedule.step = 10;
  CHECK(core::scheduled_learning_rate(spec, 9) == Approx(0.1));
  CHECK(core::scheduled_learning_rate(spec, 10) == Approx(0.05));
  CHECK(core::scheduled_learning_rate(spec, 25) == Approx(0.025));
  spec.schedule.type = core::ScheduleSpec::Type::kExponential;
  spec.schedule.gamma = 0.9;
  CHECK(core::scheduled_learning_rate(spec, 2) == Approx(0.081));
  // The schedule reaches the step: sgd at iteration 2 uses lr 0.081.
  auto u = core::Updater::create(spec, 0.0, segments(), 2);
  float w[2] = {0, 0}, g[2] = {1, 1}, step[2];
  u->compute_step(w, g, step, 2);
  CHECK(step[0] == Approx(0.081));
}

TEST_CASE("unknown updater is refused with the list of names") {
  CHECK_THROWS_WITH(core::Updater::create(spec_of("adagrad", 0.1), 0.0, segments(), 2),
                    Catch::Contains("sgd, nesterovs, adam, amsgrad, rmsprop"));
}

}  // namespace dtrain
