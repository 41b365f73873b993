// Local steps with an outer optimizer (core/train/local_steps.h, docs/architecture/core.md "Local
// steps"): the outer Nesterov step against a hand-computed case, the pseudo-gradient's residual
// sent in a later round, and the density's threshold. Rounds across nodes are in
// mesh_exchange_test (replicas identical over the mesh exchange).
#include <catch2/catch.hpp>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/codec/codec_engine.h"
#include "core/train/local_steps.h"
#include "core/train/node_round.h"
#include "core/train/outer_optimizer.h"

namespace dtrain::core {
namespace {

TrainingSpec local_spec(double density, const std::string& type, double lr, double momentum,
                        int64_t levels = 1) {
  TrainingSpec t;
  t.sync.mode = "local";
  t.sync.local.density = density;
  t.sync.local.levels = levels;
  t.sync.local.outer = {type, lr, momentum};
  return t;
}

}  // namespace

TEST_CASE("the outer Nesterov step matches a hand-computed case", "[local_steps]") {
  OuterOptimizer outer({"nesterov", 0.5, 0.9}, 2);
  std::vector<float> global = {1.f, 2.f};
  // buf = g = (0.2, -0.4); direction = g + 0.9 buf = (0.38, -0.76); global -= 0.5 direction.
  outer.step(global.data(), std::vector<float>{0.2f, -0.4f}.data());
  CHECK(global[0] == Approx(0.81f).epsilon(1e-6));
  CHECK(global[1] == Approx(2.38f).epsilon(1e-6));
  // buf = 0.9 (0.2, -0.4) + (0.1, 0) = (0.28, -0.36); direction = (0.352, -0.324).
  outer.step(global.data(), std::vector<float>{0.1f, 0.f}.data());
  CHECK(global[0] == Approx(0.634f).epsilon(1e-6));
  CHECK(global[1] == Approx(2.542f).epsilon(1e-6));
  CHECK(outer.momentum()[0] == Approx(0.28f).epsilon(1e-6));

  SECTION("sgd at learning rate 1 is plain averaging: global -= g") {
    OuterOptimizer plain({"sgd", 1.0, 0.0}, 2);
    std::vector<float> p = {1.f, 2.f};
    plain.step(p.data(), std::vector<float>{0.25f, -0.5f}.data());
    CHECK(p == std::vector<float>{0.75f, 2.5f});
    CHECK(plain.momentum().empty());
  }
}

TEST_CASE("what a round does not send goes out in a later round", "[local_steps]") {
  // One element of four a round; outer SGD at learning rate 1, so the global parameters move
  // by exactly what was sent.
  const std::vector<float> start(4, 0.f);
  LocalSteps local(local_spec(0.25, "sgd", 1.0, 0.0), CodecEngine::get("reference"),
                   start.data(), 4, 0);
  std::vector<float> replica = {-0.5f, -0.2f, 0.f, 0.f};  // pseudo-gradient (0.5, 0.2, 0, 0)
  LocalSteps::Round r = local.round(replica.data(), 1, nullptr, 0);
  CHECK(r.sent == 1);
  CHECK(r.tau == 0.5f);
  CHECK(replica == std::vector<float>{-0.5f, 0.f, 0.f, 0.f});  // element 1 waits
  CHECK(local.encoder().residual() == std::vector<float>{0.f, 0.2f, 0.f, 0.f});
  // No inner steps this time: only the residual is left to send.
  r = local.round(replica.data(), 1, nullptr, 2);
  CHECK(r.sent == 1);
  CHECK(r.tau == 0.2f);
  CHECK(replica == std::vector<float>{-0.5f, -0.2f, 0.f, 0.f});
  CHECK(local.encoder().residual() == std::vector<float>{0.f, 0.f, 0.f, 0.f});
}

TEST_CASE("overlapped, a round's outer step lands one round late and keeps the steps since",
          "[local_steps]") {
  const std::vector<float> start(4, 0.f);
  LocalSteps local(local_spec(0.25, "sgd", 1.0, 0.0), CodecEngine::get("reference"),
                   start.data(), 4, 0);
  std::vector<float> replica = {-0.5f, 0.f, 0.f, 0.f};
  local.send_round(replica.data(), 1, nullptr, 0);  // sends 0.5 at element 0, goes on at once
  CHECK(replica == std::vector<float>{-0.5f, 0.f, 0.f, 0.f});
  CHECK(local.global() == start);
  replica[1] -= 0.25f;  // the next round's steps
  // The late outer step moves the global parameters by the first round's 0.5; the replica keeps
  // only the steps since it was sent, so the second round sends just element 1's 0.25.
  const LocalSteps::Round r = local.round(replica.data(), 1, nullptr, 2);
  CHECK(r.sent == 1);
  CHECK(r.tau == 0.25f);
  CHECK(replica == std::vector<float>{-0.5f, -0.25f, 0.f, 0.f});
  CHECK(local.global() == replica);
}

TEST_CASE("levels send a magnitude: tau, then what is left at tau/2, tau/4", "[local_steps]") {
  const std::vector<float> start(4, 0.f);
  LocalSteps local(local_spec(0.25, "sgd", 1.0, 0.0, /*levels=*/3), CodecEngine::get("reference"),
                   start.data(), 4, 0);
  // Pseudo-gradient (0.875, 0.3, -0.1, 0): tau = 0.875 (one of four). Level 1 sends 0.875;
  // level 2 (0.4375) nothing; level 3 (0.21875) sends element 1, leaving 0.08125.
  std::vector<float> replica = {-0.875f, -0.3f, 0.1f, 0.f};
  const LocalSteps::Round r = local.round(replica.data(), 1, nullptr, 0);
  CHECK(r.tau == 0.875f);
  CHECK(r.sent == 2);
  CHECK(replica[0] == -0.875f);
  CHECK(replica[1] == -0.21875f);
  CHECK(replica[2] == 0.f);
  const std::vector<float> residual = local.encoder().residual();
  CHECK(residual[1] == Approx(0.08125f));
  CHECK(residual[2] == Approx(-0.1f));
}

TEST_CASE("the threshold sends the density's share of the largest magnitudes", "[local_steps]") {
  const std::vector<float> v = {0.1f, -3.f, 0.5f, 2.f, 0.f, -0.7f, 0.2f, 1.f};
  CHECK(LocalSteps::threshold_for(v, 0.25) == 2.f);    // 2 of 8: |-3| and 2
  CHECK(LocalSteps::threshold_for(v, 0.5) == 0.7f);    // 4 of 8
  CHECK(LocalSteps::threshold_for(v, 0.01) == 3.f);    // at least one
  CHECK(LocalSteps::threshold_for(v, 1.0) == 0.1f);    // every one that is not zero
  CHECK(LocalSteps::threshold_for(std::vector<float>(5, 0.f), 0.5) == 1.f);
}

TEST_CASE("a node's workers meet at a round: the last to arrive runs it once for all",
          "[local_steps]") {
  // Catch's assertions are for the main thread: the workers count, the test checks after.
  NodeRound meeting(3);
  int runs = 0;  // written by the runner only, while the others wait
  std::atomic<int> early{0}, not_ran{0};
  for (int r = 0; r < 5; ++r) {
    std::atomic<int> entered{0};
    std::vector<std::thread> workers;
    for (int w = 0; w < 3; ++w)
      workers.emplace_back([&] {
        ++entered;
        const bool ran = meeting.arrive(
            [&] {
              if (entered.load() != 3) ++early;  // everyone is in when it runs
              ++runs;
            },
            [] { return false; });
        if (!ran) ++not_ran;
      });
    for (auto& t : workers) t.join();
  }
  CHECK(runs == 5);
  CHECK(early == 0);
  CHECK(not_ran == 0);

  SECTION("a stop releases a waiting worker; the round does not run") {
    NodeRound pair(2);
    CHECK_FALSE(pair.arrive([&] { ++runs; }, [] { return true; }));
    CHECK(runs == 5);
  }

  SECTION("the runner's exception reaches it alone; the other is released") {
    NodeRound pair(2);
    std::atomic<int> threw{0}, released{0};
    std::vector<std::thread> two;
    for (int w = 0; w < 2; ++w)
      two.emplace_back([&] {
        try {
          if (pair.arrive([] { throw std::runtime_error("round failed"); }, [] { return false; }))
            ++released;
        } catch (const std::runtime_error&) {
          ++threw;
        }
      });
    for (auto& t : two) t.join();
    CHECK(threw == 1);
    CHECK(released == 1);
  }
}

}  // namespace dtrain::core
