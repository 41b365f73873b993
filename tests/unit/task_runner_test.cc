// A node's part of a cluster evaluation (daemon/node/task_runner.h) in-process, its reports
// caught by the test: inputs outside the node's data_roots are refused before anything is read,
// also a packed file that a pattern inside the roots matches but that links out of them, and a
// pattern with wildcards in its folder.
#include <catch2/catch.hpp>

#include <filesystem>
#include <mutex>

#include "daemon/node/task_runner.h"
#include "tests/test_util.h"
#include "tests/wait_for.h"

namespace dtrain::daemon {
namespace {

using namespace std::chrono_literals;

// The error of the one failure a task part reports, or "" when it reported none.
std::string failure_of(const DaemonConfig& config, const TaskMessage& task) {
  std::mutex mutex;
  std::vector<FailedReport> failed;
  TaskRunner runner(config, 7, task, [&](const NodeReport& r) {
    std::lock_guard<std::mutex> lock(mutex);
    if (const auto* f = std::get_if<FailedReport>(&r)) failed.push_back(*f);
  });
  REQUIRE(testing::wait_for([&] { return runner.done(); }, 10s, "the task part to end"));
  std::lock_guard<std::mutex> lock(mutex);
  return failed.size() == 1 ? failed[0].error : "";
}

TaskMessage eval_of(const std::string& format, const std::string& path) {
  TaskMessage t;
  t.kind = TaskKind::Eval;
  t.format = format;
  t.path = path;
  t.metrics = {"classification"};
  t.parts = {0};
  t.part_count = 1;
  return t;
}

}  // namespace

TEST_CASE("a task's inputs outside the node's data_roots are refused before they are read") {
  const std::string dir = testing::temp_dir();
  const std::string data = dir + "/data";
  std::filesystem::create_directories(data + "/packed");
  testing::write_text(dir + "/outside.dtb", "not even a packed file");
  std::filesystem::create_symlink(dir + "/outside.dtb", data + "/packed/test-0.dtb");
  DaemonConfig config;
  config.name = "node-a";
  config.data_dir = dir + "/state";
  config.data_roots = {data};
  const std::string outside = "is outside the folders the nodes read job data from";
  CHECK_THAT(failure_of(config, eval_of("csv", "/etc/passwd")), Catch::Contains(outside));
  // A match of a pattern inside the roots that links out of them: refused by name, unread.
  const std::string linked = failure_of(config, eval_of("packed", data + "/packed/test-*.dtb"));
  CHECK_THAT(linked, Catch::Contains(data + "/packed/test-0.dtb' " + outside));
  CHECK_THAT(linked, !Catch::Contains("not a packed file"));
  CHECK_THAT(failure_of(config, eval_of("packed", data + "/pack?d/test-*.dtb")),
             Catch::Contains("has wildcards in its folder"));
  TaskMessage shards = eval_of("packed", "");
  shards.shards = dir + "/{node}/test-*.dtb";
  CHECK_THAT(failure_of(config, shards), Catch::Contains(outside));
}

}  // namespace dtrain::daemon
