// The stats history's parts in one process: a node's recorder (the stride, what a row holds,
// when it sends), the report's reader (what no real node sends is refused), and the
// controller's SQLite store (rows kept once, per node, across a reopen; non-finite figures as
// null).
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "daemon/controller/stats_store.h"
#include "daemon/node/stats_recorder.h"
#include "daemon/protocol/job_stats.h"
#include "tests/test_util.h"

using namespace dtrain;
using namespace dtrain::daemon;

namespace {

core::WorkerStep step(int64_t iteration, double loss) {
  core::WorkerStep s;
  s.iteration = iteration;
  s.epoch = iteration / 10;
  s.loss = loss;
  s.samples = 64;
  s.sharing = true;
  s.codec.tau = 1e-3f;
  s.codec.density = 0.01;
  s.codec.message_bytes = 4000;
  s.times = {1.0, 0.5, 0.5, 4.0, 2.0};  // wait, apply, data, compute, encode: 8 ms
  return s;
}

}  // namespace

TEST_CASE("the recorder keeps every stride-th step of each worker and sends them", "[stats]") {
  CHECK(StatsRecorder::stride_for(1) == 1);
  CHECK(StatsRecorder::stride_for(100000) == 1);
  CHECK(StatsRecorder::stride_for(100001) == 2);
  CHECK(StatsRecorder::stride_for(2500000) == 25);
  std::vector<Json> sent;
  StatsRecorder r([&](const Json& j) { sent.push_back(j); });
  r.set_stride(3);
  for (int64_t it = 0; it < 10; ++it) {
    r.on_worker_step(0, step(it, 2.0 - 0.1 * double(it)));
    r.on_worker_step(1, step(it, 1.0));
  }
  core::EpochSummary e;
  e.epoch = 0;
  e.train_loss = 1.5;
  e.evaluated = false;
  r.on_epoch(e);
  CHECK(sent.empty());  // less than a second: nothing sent yet
  r.flush();
  REQUIRE(sent.size() == 1);
  StatsReport report;
  REQUIRE(read_stats_report(sent[0], report));
  REQUIRE(report.steps.size() == 8);  // iterations 1, 4, 7, 10 of two workers
  CHECK(report.steps[0][0] == 0);     // worker
  CHECK(report.steps[0][1] == 1);     // iteration, 1-based
  CHECK(report.steps[2][1] == 4);
  CHECK(report.steps[0][3] == Approx(2.0));                // loss
  CHECK(report.steps[0][4] == Approx(64 * 1000.0 / 8.0));  // samples/s of an 8 ms step
  CHECK(report.steps[0][10] == 4.0);                       // compute_ms
  CHECK(report.steps[0][13] == 1.0);                       // wait_ms
  CHECK(report.steps[0][15] == 0.5);                       // data_ms
  REQUIRE(report.epochs.size() == 1);
  CHECK(report.epochs[0][3] == -1);  // not evaluated
  r.flush();
  CHECK(sent.size() == 1);  // nothing new: nothing sent
}

TEST_CASE("a stats report no real node sends is refused", "[stats]") {
  StatsReport out;
  CHECK(read_stats_report(Json::object(), out));  // empty: fine
  CHECK_FALSE(read_stats_report(Json::array(), out));
  CHECK_FALSE(read_stats_report({{"steps", {{1, 2, 3}}}}, out));  // a short row
  Json row = Json::array();
  for (size_t i = 0; i < kStepColumns.size(); ++i) row.push_back(1.0);
  CHECK(read_stats_report({{"steps", {row}}}, out));
  Json text_cell = row;
  text_cell[3] = "x";
  CHECK_FALSE(read_stats_report({{"steps", {text_cell}}}, out));
  Json bad_worker = row;
  bad_worker[0] = -1;
  CHECK_FALSE(read_stats_report({{"steps", {bad_worker}}}, out));
  Json many = Json::array();
  for (size_t i = 0; i <= kMaxStatsRows; ++i) many.push_back(row);
  CHECK_FALSE(read_stats_report({{"steps", many}}, out));
}

TEST_CASE("the store keeps each row once, per node, across a reopen", "[stats]") {
  const std::string path = dtrain::testing::temp_dir() + "/stats.db";
  StatsReport a;
  for (int it = 1; it <= 3; ++it) {
    std::array<double, kStepColumns.size()> row{};
    row[1] = it;
    row[2] = 1;
    row[3] = it == 2 ? std::nan("") : 1.0 / it;
    a.steps.push_back(row);
  }
  a.epochs.push_back({1, 0.5, 1000, 0.85, 3.0});
  {
    StatsStore store(path);
    store.add("00000000000000aa", "node-1", a);
    store.add("00000000000000aa", "node-1", a);  // sent again: kept once
    store.add("00000000000000aa", "node-2", a);
    store.add("00000000000000bb", "node-1", a);
  }
  StatsStore store(path);
  const Json all = store.query("00000000000000aa", "");
  REQUIRE(all["steps"].size() == 6);
  CHECK(all["steps"][0][0] == "node-1");
  CHECK(all["steps"][1][4].is_null());  // the NaN loss
  CHECK(all["steps"][2][4].get<double>() == Approx(1.0 / 3));
  CHECK(all["epochs"].size() == 2);
  CHECK(all["step_columns"][0] == "node");
  CHECK(all["step_columns"].size() == kStepColumns.size() + 1);
  const Json two = store.query("00000000000000aa", "node-2");
  CHECK(two["steps"].size() == 3);
  // The dashboard's sample: every k-th iteration, so about max_steps rows come back.
  const Json sampled = store.query("00000000000000aa", "node-2", 1);
  CHECK(sampled["every"] == 3);
  REQUIRE(sampled["steps"].size() == 1);
  CHECK(sampled["steps"][0][2].get<double>() == 3);  // iteration 3
  CHECK(store.query("00000000000000cc", "")["steps"].empty());
}

TEST_CASE("a store that cannot be opened says which file and the fix", "[stats]") {
  REQUIRE_THROWS_WITH(StatsStore("/nonexistent-dir/stats.db"),
                      Catch::Contains("/nonexistent-dir/stats.db") &&
                          Catch::Contains("data_dir"));
}
