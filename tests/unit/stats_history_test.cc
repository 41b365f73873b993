// The stats history's parts in one process: a node's recorder (the stride, what a row holds,
// when it sends), the report's reader (what no real node sends is refused), and the
// controller's SQLite store (rows kept once, per node, across a reopen; non-finite figures as
// null).
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "daemon/controller/stats_store.h"
#include "daemon/node/stats_recorder.h"
#include "daemon/protocol/control_messages.h"
#include "daemon/protocol/job_stats.h"
#include "tests/test_util.h"
#include "daemon/protocol/control_frames.h"

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

// A Stats report frame with these flat step cells, as a forged or broken node might send it.
std::vector<uint8_t> stats_frame(const std::vector<double>& steps) {
  namespace control = daemon::control;
  flatbuffers::FlatBufferBuilder fbb;
  const auto table = control::CreateStatsReport(fbb, fbb.CreateVector(steps));
  control::JobMessageBuilder m(fbb);
  m.add_job_id(7);
  m.add_kind(JobKind::Stats);
  m.add_stats(table);
  return daemon::control_frame_bytes(fbb, control::ControlBody::JobMessage,
                                        m.Finish().Union());
}

bool read_stats(const std::vector<uint8_t>& frame, StatsReport& out) {
  JobMessageIn in;
  if (!read_job_message(frame, in)) return false;
  out = std::get<StatsReport>(in.report);
  return true;
}

}  // namespace

TEST_CASE("the recorder keeps every stride-th step of each worker and sends them", "[stats]") {
  CHECK(StatsRecorder::stride_for(1) == 1);
  CHECK(StatsRecorder::stride_for(100000) == 1);
  CHECK(StatsRecorder::stride_for(100001) == 2);
  CHECK(StatsRecorder::stride_for(2500000) == 25);
  std::vector<StatsReport> sent;
  StatsRecorder r([&](const StatsReport& rows) { sent.push_back(rows); });
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
  StatsReport report;  // as the controller reads it off the wire
  REQUIRE(read_stats(report_frame(7, sent[0]), report));
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
  CHECK(read_stats(stats_frame({}), out));  // empty: fine
  CHECK(out.steps.empty());
  CHECK_FALSE(read_stats(stats_frame({1, 2, 3}), out));  // a short row
  const std::vector<double> row(kStepColumns.size(), 1.0);
  REQUIRE(read_stats(stats_frame(row), out));
  CHECK(out.steps.size() == 1);
  std::vector<double> row_and_a_half = row;
  row_and_a_half.insert(row_and_a_half.end(), row.begin(), row.begin() + 8);
  CHECK_FALSE(read_stats(stats_frame(row_and_a_half), out));
  std::vector<double> bad_worker = row;
  bad_worker[0] = -1;
  CHECK_FALSE(read_stats(stats_frame(bad_worker), out));
  std::vector<double> huge_iteration = row;
  huge_iteration[1] = 1e16;
  CHECK_FALSE(read_stats(stats_frame(huge_iteration), out));
  std::vector<double> many;
  for (size_t i = 0; i <= kMaxStatsRows; ++i) many.insert(many.end(), row.begin(), row.end());
  CHECK_FALSE(read_stats(stats_frame(many), out));
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
