// A node's part of a cluster evaluation (daemon/node/task_runner.h) in-process, its reports
// caught by the test: inputs outside the node's data_roots are refused before anything is read,
// also a packed file that a pattern inside the roots matches but that links out of them, and a
// pattern with wildcards in its folder; inference inputs larger than the node's job memory are
// refused from their first MiB, before they are read.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>

#include "core/io/model_file.h"
#include "core/model/model.h"
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

// The bytes of a saved 4-input softmax model, as a task brings them.
std::vector<uint8_t> small_model_bytes(const std::string& dir) {
  core::ModelFile saved;
  saved.spec_yaml =
      "name: t\nmodel:\n  input: [4]\n  layers:\n"
      "    - output: {units: 2, activation: softmax, loss: mcxent}\n"
      "data:\n  train: {format: csv, path: none.csv}\n";
  core::Model m(testing::job_with_model("  input: [4]\n  layers:\n"
                                        "    - output: {units: 2, activation: softmax, loss: mcxent}\n")
                    .model);
  saved.params.assign(size_t(m.num_params()), 0.1f);
  core::write_model_file(dir + "/small.dtm", saved);
  std::ifstream in(dir + "/small.dtm", std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("inference input larger than a job may hold on the node is refused before it is read") {
  const std::string dir = testing::temp_dir();
  std::string rows;
  for (int i = 0; i < 60000; ++i) rows += "k" + std::to_string(i) + ",0.1,0.2,0.3,0.4\n";
  testing::write_text(dir + "/big.csv", rows);  // about 1.5 MB of text, 2.4 MB as floats
  DaemonConfig config;
  config.name = "node-a";
  config.data_dir = dir + "/state";
  config.job_memory_mb = 1;
  TaskMessage infer = eval_of("csv", dir + "/big.csv");
  infer.kind = TaskKind::Infer;
  infer.key_column = 0;
  infer.model = small_model_bytes(dir);
  CHECK_THAT(failure_of(config, infer),
             Catch::Contains("the data " + dir + "/big.csv would take about 3 MB in memory, more "
                             "than the 1 MB a job may hold on this node"));
}

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
