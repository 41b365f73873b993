// Staleness control and the checks around it (docs/architecture/core.md, "Staleness and
// corrections"): the step gate holds a worker to the bound and wakes it when the messages come;
// training with bsp or bounded K never runs a worker more than K steps ahead of another's applied
// messages (a slow worker is made slow on purpose; async, the control, runs far ahead); the
// divergence monitor and the update audit.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

#include "core/codec/reference_codec.h"
#include "core/train/divergence_monitor.h"
#include "core/train/training_run.h"
#include "core/train/step_gate.h"
#include "core/train/update_audit.h"
#include "tests/test_util.h"

namespace dtrain {
namespace {

using namespace std::chrono_literals;
using core::StepGate;

auto never = [] { return false; };

// Trains a tiny classifier on 3 workers in this process with `sync`; worker 0 sleeps 2 ms
// after each message it produces, so the others would run ahead of it.
core::TrainingResult train_tiny(const std::string& sync) {
  const std::string dir = testing::temp_dir();
  std::string csv;
  for (int i = 0; i < 600; ++i) {
    const double x = std::sin(i * 0.7), y = std::cos(i * 1.3);
    csv += std::to_string(x) + "," + std::to_string(y) + "," + (x * y > 0 ? "1" : "0") + "\n";
  }
  testing::write_text(dir + "/train.csv", csv);
  const std::string spec =
      "name: tiny\nmodel:\n  input: [2]\n  layers:\n    - dense: {units: 8}\n"
      "    - output: {units: 2, activation: softmax, loss: mcxent}\n"
      "  updater: {type: sgd, learning_rate: 0.1}\n"
      "data:\n  train: {format: csv, path: " + dir + "/train.csv}\n"
      "training:\n  epochs: 2\n  batch_size_per_worker: 8\n  workers_per_node: 3\n"
      "  sync: " + sync + "\n  stop_on_divergence: false\n";
  core::JobSpec job = core::parse_job_spec_text(spec, "tiny.yaml", {});
  core::LocalTrainingOptions options;
  options.write_model = false;
  options.threads = 1;
  options.message_observer = [](const core::EncodedMessage& m) {
    if (m.origin == 0) std::this_thread::sleep_for(2ms);
  };
  core::TrainingListener quiet;
  return core::train_local(job, quiet, options);
}

}  // namespace

TEST_CASE("the step gate waits for minibatches 0..b-K of every live worker") {
  StepGate gate(2, {5, 5, 3});
  std::vector<int> waiting;
  CHECK(gate.wait(0, 0, 0, 1ms, never, &waiting));
  CHECK(gate.wait(0, 0, 1, 1ms, never, &waiting));  // b - K = -1: nothing needed yet
  CHECK_FALSE(gate.wait(0, 0, 2, 20ms, never, &waiting));  // needs minibatch 0 of 1 and 2
  CHECK(waiting == std::vector<int>{1, 2});
  gate.delivered(1, 0, 0);
  CHECK_FALSE(gate.wait(0, 0, 2, 1ms, never, &waiting));
  CHECK(waiting == std::vector<int>{2});
  gate.delivered(2, 1, 0);  // another epoch's step does not count for this one
  CHECK_FALSE(gate.wait(0, 0, 2, 1ms, never, &waiting));
  gate.delivered(2, 0, -1);  // nor does a taken-over minibatch
  CHECK_FALSE(gate.wait(0, 0, 2, 1ms, never, &waiting));
  gate.set_live(2, false);  // a lost worker is not waited for
  CHECK(gate.wait(0, 0, 2, 1ms, never, &waiting));
  gate.set_live(2, true);
  for (int b = 0; b < 3; ++b) gate.delivered(2, 0, b);
  for (int b = 1; b < 5; ++b) gate.delivered(1, 0, b);
  // Worker 2's shard has 3 minibatches: all of them, not b - K + 1, are what is waited for.
  CHECK(gate.wait(0, 0, 6, 1ms, never, &waiting));
  CHECK(gate.steps_in(1, 0) == 5);

  StepGate async(0, {5, 5});
  CHECK(async.wait(0, 0, 4, 1ms, never, &waiting));  // async never waits
}

TEST_CASE("a run resumed after minibatch b of an epoch waits only for the minibatches after b") {
  StepGate gate(1, {10, 10, 4});
  std::vector<int> waiting;
  CHECK_FALSE(gate.wait(0, 3, 6, 1ms, never, &waiting));  // before: 0..5 of both others missing
  CHECK(waiting == std::vector<int>{1, 2});
  gate.resumed_at(3, 6);  // minibatches 0..5 of epoch 3 are in the checkpoint
  CHECK(gate.wait(0, 3, 6, 1ms, never, &waiting));
  CHECK(gate.steps_in(2, 3) == 4);  // a shard of 4 minibatches is done, not 6
  CHECK_FALSE(gate.wait(0, 3, 7, 1ms, never, &waiting));  // minibatch 6 must still come
  CHECK(waiting == std::vector<int>{1});
  gate.delivered(1, 3, 6);
  CHECK(gate.wait(0, 3, 7, 1ms, never, &waiting));
  CHECK(gate.steps_in(0, 2) == 0);  // other epochs untouched
}

TEST_CASE("takeover steps wait for the other survivors' takeover steps, dealt round-robin") {
  StepGate gate(1, {5, 5, 5, 5});
  std::vector<int> waiting;
  gate.set_live(2, false);  // worker 2's node was lost: 3 survivors take over 8 minibatches
  const std::vector<int64_t> counts = takeover_counts(gate, 8, 3);
  CHECK(counts == std::vector<int64_t>{3, 3, 0, 2});  // indices 0,3,6 / 1,4,7 / - / 2,5
  CHECK(takeover_counts(gate, 8, 4) == std::vector<int64_t>{0, 0, 0, 0});  // not the gate's view
  CHECK(gate.wait_takeover(0, 1, 1, 1ms, never, &waiting));  // not started: nothing to wait for
  gate.start_takeover(1, counts);
  CHECK(gate.wait_takeover(0, 1, 0, 1ms, never, &waiting));  // step 0 waits for nothing (bsp)
  CHECK_FALSE(gate.wait_takeover(0, 1, 1, 20ms, never, &waiting));  // needs step 0 of 1 and 3
  CHECK(waiting == std::vector<int>{1, 3});
  gate.delivered(1, 1, -1);
  gate.delivered(3, 1, 0);  // an own step does not count as a takeover step
  CHECK_FALSE(gate.wait_takeover(0, 1, 1, 1ms, never, &waiting));
  CHECK(waiting == std::vector<int>{3});
  gate.delivered(3, 1, -1);
  CHECK(gate.wait_takeover(0, 1, 1, 1ms, never, &waiting));
  gate.delivered(1, 1, -1);
  gate.delivered(3, 1, -1);  // worker 3's last: it has 2 in all
  CHECK(gate.wait_takeover(0, 1, 2, 1ms, never, &waiting));
  CHECK_FALSE(gate.wait_takeover(0, 1, 3, 1ms, never, &waiting));  // step 2 of worker 1
  CHECK(waiting == std::vector<int>{1});
  gate.delivered(1, 1, -1);
  CHECK(gate.wait_takeover(0, 1, 3, 1ms, never, &waiting));  // worker 3 is waited for up to 2
  CHECK(gate.steps_in(1, 1) == 0);  // takeover steps are not own steps
  StepGate async(0, {5, 5});
  async.start_takeover(0, {3, 3});
  CHECK(async.wait_takeover(0, 0, 2, 1ms, never, &waiting));  // async never waits
}

TEST_CASE("a waiting worker wakes when the message comes, and a stop ends the wait") {
  StepGate gate(1, {10, 10});
  std::thread later([&] {
    std::this_thread::sleep_for(30ms);
    gate.delivered(1, 0, 0);
  });
  const auto start = std::chrono::steady_clock::now();
  CHECK(gate.wait(0, 0, 1, 10s, never, nullptr));
  later.join();
  CHECK(std::chrono::steady_clock::now() - start < 2s);
  std::atomic<bool> stop{false};  // set on another thread than the gate's wait reads it
  std::thread stopper([&] {
    std::this_thread::sleep_for(30ms);
    stop = true;
  });
  CHECK_FALSE(gate.wait(0, 0, 5, 10s, [&] { return stop.load(); }, nullptr));
  stopper.join();
}

TEST_CASE("no worker runs more than K steps ahead of a slow worker's applied messages") {
  const core::TrainingResult async = train_tiny("async");
  const core::TrainingResult bounded = train_tiny("{bounded: 2}");
  const core::TrainingResult bsp = train_tiny("bsp");
  INFO("async " << async.max_ahead << ", bounded 2: " << bounded.max_ahead << ", bsp "
                << bsp.max_ahead);
  CHECK(async.max_ahead > 3);  // the control: without a bound the others run ahead
  CHECK(bounded.max_ahead <= 2);
  CHECK(bounded.max_ahead >= 1);
  CHECK(bsp.max_ahead <= 1);
}

TEST_CASE("the divergence monitor stops a rising loss and a model at chance, with figures") {
  core::JobSpec job = testing::job_with_model(
      "  input: [4]\n  layers:\n    - output: {units: 10, activation: softmax, loss: mcxent}\n");
  core::DivergenceMonitor m(job);
  CHECK_FALSE(m.check_epoch(0, 0.60, 0.70));
  CHECK_FALSE(m.check_epoch(1, 0.45, 0.80));
  CHECK_FALSE(m.check_epoch(2, 0.85, 0.78));  // worse, but not twice the best
  const auto rose = m.check_epoch(3, 1.00, -1);
  REQUIRE(rose);
  CHECK_THAT(*rose, Catch::Contains("epoch 4") && Catch::Contains("rose to 1.0000") &&
                        Catch::Contains("0.4500 in epoch 2"));
  CHECK_THAT(m.fix(), Catch::Contains("learning_rate"));
  CHECK(m.fix().find("sync: bsp") == std::string::npos);  // the job is bsp already

  core::DivergenceMonitor chance(job);
  CHECK_FALSE(chance.check_epoch(0, 2.2, 0.10));  // the first epoch may still be at chance
  const auto at_chance = chance.check_epoch(1, 2.1, 0.11);
  REQUIRE(at_chance);
  CHECK_THAT(*at_chance, Catch::Contains("0.1100") && Catch::Contains("10 classes"));
  CHECK(core::DivergenceMonitor(job).check_epoch(0, NAN, -1));

  core::DivergenceMonitor steps(job);
  for (int i = 0; i < 60; ++i) steps.on_step(0.5);
  CHECK_FALSE(steps.diverging());
  for (int i = 0; i < 40; ++i) steps.on_step(5.0);
  CHECK(steps.diverging());
}

TEST_CASE("the update audit tells sets of applied messages apart and checks the replica") {
  std::vector<core::EncodedMessage> messages(3);
  for (int k = 0; k < 3; ++k) {
    messages[k].id = 100 + k;
    messages[k].origin = k % 2;
    messages[k].tau = 0.5f;
    messages[k].length = 4;
    messages[k].words = {uint32_t(k), uint32_t(3) | core::kSparseSignBit};
  }
  core::UpdateAudit a(4, true), b(4, false), missing(4, false), twice(4, false);
  for (int k : {0, 1, 2}) a.applied(messages[k]);
  for (int k : {2, 0, 1}) b.applied(messages[k]);
  for (int k : {0, 2}) missing.applied(messages[k]);
  for (int k : {0, 1, 1, 2}) twice.applied(messages[k]);
  CHECK(a.digest() == b.digest());
  CHECK(a.count() == 3);
  CHECK(missing.digest() != a.digest());
  CHECK(twice.digest() != a.digest());
  CHECK(twice.count() == 4);

  const std::vector<float> initial = {1, 2, 3, 4};
  std::vector<float> params = initial;
  for (const auto& m : messages) core::reference_apply(m, params.data());
  CHECK(a.relative_deviation(initial.data(), params.data()) < 1e-7);
  core::reference_apply(messages[1], params.data());  // applied twice
  CHECK(a.relative_deviation(initial.data(), params.data()) > 1e-2);
}

}  // namespace dtrain
