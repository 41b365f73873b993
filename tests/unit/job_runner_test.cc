// A node's part of a training job in-process (daemon/node/job_runner.h): a JobRunner on a real
// loopback data channel, its reports caught by the test instead of sent to a controller. A part
// whose spec does not parse fails by name; a one-node job trains to its end and reports its
// result with the update audit and the model file's digest; a cancelled part says it was
// cancelled; a data plan naming a file the node did not list fails the part; a node joining a
// running job does not declare its (not yet told) peers lost while its data loads. Every wait
// has a deadline and says what it waited for.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>

#include "core/data/packed_file.h"
#include "core/train/training_data.h"
#include "daemon/node/job_runner.h"
#include "daemon/protocol/job_folder.h"
#include "daemon/protocol/model_fetch.h"
#include "daemon/protocol/node_reports.h"
#include "tests/loopback_udp.h"
#include "tests/test_util.h"
#include "tests/wait_for.h"

namespace dtrain::daemon {
namespace {

using namespace std::chrono_literals;
using testing::wait_for;

constexpr uint32_t kSelf = 41;

// The reports a part sends, as the agent would queue them.
struct Reports {
  std::mutex mutex;
  std::vector<std::pair<NodeReport, uint64_t>> got;
  JobRunner::Report sink() {
    return [this](const NodeReport& r, uint64_t part) {
      std::lock_guard<std::mutex> lock(mutex);
      got.push_back({r, part});
    };
  }
  template <class T>
  std::vector<T> of() {
    std::lock_guard<std::mutex> lock(mutex);
    std::vector<T> out;
    for (const auto& [r, part] : got)
      if (const T* t = std::get_if<T>(&r)) out.push_back(*t);
    return out;
  }
  bool has_log(const std::string& text) {
    for (const LogReport& l : of<LogReport>())
      if (l.line.find(text) != std::string::npos) return true;
    return false;
  }
};

struct NodeUnderTest {
  DaemonConfig config;
  std::unique_ptr<DataChannel> channel;
  std::string dir = testing::temp_dir();
  NodeUnderTest() {
    config.name = "node-a";
    config.data_dir = dir;
    config.threads = 1;
    transport::EndpointConfig ec;
    ec.node_id = kSelf;
    ec.bind_address = "127.0.0.1";
    ec.port = 0;
    ec.key.fill(3);
    ec.peer_timeout = 1000ms;  // as the start messages say
    channel = std::make_unique<DataChannel>(ec);
  }
  // This node the job's only member.
  StartMessage start(const std::string& spec, uint64_t part = 77) {
    StartMessage s;
    s.spec = spec;
    s.name = "t";
    s.part = part;
    s.peer_timeout_ms = 1000;
    JobMemberInfo me;
    me.id = kSelf;
    me.name = config.name;
    me.address = "127.0.0.1";
    me.port = channel->endpoint().port();
    s.members = {me};
    return s;
  }
  std::string spec(int epochs, const std::string& data) {
    return "name: t\nseed: 3\nmodel:\n  input: [4]\n  layers:\n    - dense: {units: 8, "
           "activation: relu}\n    - output: {units: 2, activation: softmax, loss: mcxent}\n"
           "  updater: {type: adam, learning_rate: 0.01}\ndata:\n" + data +
           "training: {epochs: " + std::to_string(epochs) +
           ", batch_size: 16, workers_per_node: 1, audit_updates: true}\n"
           "output: {model: t.dtm}\n";
  }
};

}  // namespace

TEST_CASE("a part whose spec does not parse reports Failed, naming the problem") {
  NodeUnderTest node;
  Reports reports;
  JobRunner runner(node.config, *node.channel, kSelf, 5, node.start("name: [broken\n"),
                   reports.sink());
  REQUIRE(wait_for([&] { return runner.done(); }, 10s, "the part to end"));
  const auto failed = reports.of<FailedReport>();
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].error.find("malformed YAML") != std::string::npos);
  CHECK_FALSE(failed[0].cancelled);
  CHECK(reports.of<ResultReport>().empty());
}

TEST_CASE("a start message that omits this node, or names a peer by no IP, fails the part only") {
  NodeUnderTest node;
  const std::string csv = testing::write_separable_csv(node.dir);
  const std::string spec =
      node.spec(1, "  train: {format: csv, path: " + csv + "}\n");
  StartMessage without_me = node.start(spec);
  without_me.members[0].id = kSelf + 1;  // someone else only
  JobMemberInfo by_name = node.start(spec).members[0];
  by_name.id = kSelf + 2;
  by_name.name = "node-b";
  by_name.address = "node-b.example";  // a host name, not an IP address
  StartMessage with_bad_peer = node.start(spec);
  with_bad_peer.members.push_back(by_name);
  const std::pair<StartMessage, std::string> cases[] = {
      {without_me, "does not list this node (id 41)"},
      {with_bad_peer, "peer address 'node-b.example' is not an IP address"}};
  uint64_t job = 20;
  for (const auto& [start, error] : cases) {
    Reports reports;
    JobRunner runner(node.config, *node.channel, kSelf, ++job, start, reports.sink());
    REQUIRE(wait_for([&] { return runner.done(); }, 10s, "the part to end"));
    const auto failed = reports.of<FailedReport>();
    REQUIRE(failed.size() == 1);
    CHECK_THAT(failed[0].error, Catch::Contains(error));
  }
}

TEST_CASE("a one-node job trains to its end and reports its result, audited") {
  NodeUnderTest node;
  Reports reports;
  const std::string csv = testing::write_separable_csv(node.dir);
  const std::string data = "  train: {format: csv, path: " + csv + "}\n  test: {format: csv, "
                           "path: " + csv + "}\n";
  JobRunner runner(node.config, *node.channel, kSelf, 6, node.start(node.spec(2, data)),
                   reports.sink());
  REQUIRE(wait_for([&] { return runner.done(); }, 60s, "the one-node job to end"));
  INFO("failures: " << reports.of<FailedReport>().size());
  const auto results = reports.of<ResultReport>();
  REQUIRE(results.size() == 1);
  const ResultReport& r = results[0];
  CHECK(r.iterations == 2 * (512 / 16));
  REQUIRE(r.applied.has_value());
  CHECK(r.applied->messages > 0);
  CHECK(r.applied->deviation >= 0);
  CHECK(r.applied->deviation < 1e-4);
  REQUIRE(r.evaluation.has_value());
  CHECK(r.evaluation->examples == 512);
  CHECK(r.model_path == node.dir + "/jobs/0000000000000006/t.dtm");
  CHECK(r.model_sha256 == file_sha256(r.model_path));
  CHECK_FALSE(r.params_sample.empty());
  CHECK(reports.has_log("epoch 2: train loss"));
  std::lock_guard<std::mutex> lock(reports.mutex);
  for (const auto& [report, part] : reports.got) CHECK(part == 77);  // every report its part's
}

TEST_CASE("two jobs naming the same output.model keep their own model and checkpoints") {
  NodeUnderTest node;
  const std::string csv = testing::write_separable_csv(node.dir);
  const std::string data = "  train: {format: csv, path: " + csv + "}\n";
  std::map<uint64_t, ResultReport> results;
  for (const auto& [job, seed] : {std::pair<uint64_t, int>{8, 3}, {9, 4}}) {
    std::string spec = node.spec(2, data);
    spec.replace(spec.find("seed: 3"), 7, "seed: " + std::to_string(seed));
    spec.replace(spec.find("{model: t.dtm}"), 14, "{model: t.dtm, checkpoint_every: 8}");
    Reports reports;
    JobRunner runner(node.config, *node.channel, kSelf, job, node.start(spec), reports.sink());
    REQUIRE(wait_for([&] { return runner.done(); }, 60s, "job " + std::to_string(job) + " to end"));
    REQUIRE(reports.of<ResultReport>().size() == 1);
    results[job] = reports.of<ResultReport>()[0];
  }
  const std::string first = node.dir + "/jobs/0000000000000008/";
  const std::string second = node.dir + "/jobs/0000000000000009/";
  CHECK(results[8].model_path == first + "t.dtm");
  CHECK(results[9].model_path == second + "t.dtm");
  // The second job replaced and pruned nothing of the first's: its model is the one it
  // reported, and its checkpoints are all there.
  CHECK(file_sha256(first + "t.dtm") == results[8].model_sha256);
  CHECK(results[8].model_sha256 != results[9].model_sha256);
  for (const std::string& folder : {first, second}) {
    int checkpoints = 0;
    for (const auto& entry : std::filesystem::directory_iterator(folder))
      checkpoints += entry.path().filename().string().rfind("t.ckpt-", 0) == 0;
    CHECK(checkpoints == 2);
  }
}

TEST_CASE("a job from before job folders resumes from its checkpoint in data_dir/models, "
          "never from another job's of the same name") {
  NodeUnderTest node;
  const std::string csv = testing::write_separable_csv(node.dir);
  std::string spec = node.spec(2, "  train: {format: csv, path: " + csv + "}\n");
  spec.replace(spec.find("{model: t.dtm}"), 14, "{model: t.dtm, checkpoint_every: 32}");
  SECTION("another job's") {
    // The files in models/ were written by a job of another spec (seed 4) with the same
    // output.model: this job has no checkpoint of its own, and says so.
    std::string other = spec;
    other.replace(other.find("seed: 3"), 7, "seed: 4");
    Reports reports;
    JobRunner first(node.config, *node.channel, kSelf, 11, node.start(other), reports.sink());
    REQUIRE(wait_for([&] { return first.done(); }, 60s, "the other job to end"));
    std::filesystem::rename(node.dir + "/jobs/000000000000000b", node.dir + "/models");
    StartMessage resume = node.start(spec);
    resume.resume_epoch = 1;
    Reports resumed;
    JobRunner again(node.config, *node.channel, kSelf, 10, resume, resumed.sink());
    REQUIRE(wait_for([&] { return again.done(); }, 60s, "the refused resume to end"));
    REQUIRE(resumed.of<FailedReport>().size() == 1);
    CHECK_THAT(resumed.of<FailedReport>()[0].error,
               Catch::Contains("no whole checkpoint of " + node.dir +
                               "/jobs/000000000000000a/t.dtm with 1 epochs done"));
    CHECK_FALSE(resumed.has_log("resuming from"));
    return;
  }
  {
    Reports reports;
    JobRunner first(node.config, *node.channel, kSelf, 10, node.start(spec), reports.sink());
    REQUIRE(wait_for([&] { return first.done(); }, 60s, "the first run to end"));
    REQUIRE(reports.of<ResultReport>().size() == 1);
  }
  // Where the earlier release kept the model and its checkpoints.
  const std::string folder = node.dir + "/jobs/000000000000000a";
  std::filesystem::rename(folder, node.dir + "/models");
  StartMessage resume = node.start(spec);
  resume.resume_epoch = 1;
  Reports reports;
  JobRunner again(node.config, *node.channel, kSelf, 10, resume, reports.sink());
  REQUIRE(wait_for([&] { return again.done(); }, 60s, "the resumed run to end"));
  INFO("failures: " << (reports.of<FailedReport>().empty() ? "" : reports.of<FailedReport>()[0].error));
  REQUIRE(reports.of<ResultReport>().size() == 1);
  CHECK(reports.has_log("resuming from " + node.dir + "/models/t.ckpt-32.dtm (1 epochs done"));
  CHECK(reports.of<ResultReport>()[0].model_path == folder + "/t.dtm");  // new outputs: its folder
}

// A UDP port on loopback that takes datagrams and never answers: a peer that has not heard of
// this node yet.
using SilentPeer = testing::LoopbackUdp;

// One packed shard of 64 examples of the spec's shape (4 features, 2 classes).
void write_shard(const std::string& path) {
  core::Dataset d;
  d.features.resize({64, 4});
  for (int64_t i = 0; i < d.features.size(); ++i) d.features[i] = float(i % 7);
  std::vector<int32_t> labels;
  for (int i = 0; i < 64; ++i) labels.push_back(i % 2);
  core::set_class_labels(d, labels, 2, "test");
  std::vector<int64_t> order(64);
  for (int i = 0; i < 64; ++i) order[size_t(i)] = i;
  core::write_packed_file(path, d, order, 0, 64, core::smallest_encoding(d), core::Normalizer());
}

// Runs one part to its end; the error of its one failure ("" when it reported its result).
std::string failure_of(NodeUnderTest& node, uint64_t job, const StartMessage& start) {
  Reports reports;
  JobRunner runner(node.config, *node.channel, kSelf, job, start, reports.sink());
  REQUIRE(wait_for([&] { return runner.done(); }, 60s, "part " + std::to_string(job) + " to end"));
  const auto failed = reports.of<FailedReport>();
  if (failed.empty()) return reports.of<ResultReport>().size() == 1 ? "" : "no result";
  return failed.size() == 1 ? failed[0].error : "failed " + std::to_string(failed.size()) + " times";
}

TEST_CASE("inputs outside the node's data_roots are refused without a word of their content") {
  NodeUnderTest node;
  const std::string data = node.dir + "/data";
  std::filesystem::create_directories(data);
  node.config.data_roots = {data};
  const std::string csv = testing::write_separable_csv(data);
  std::filesystem::create_symlink("/etc", data + "/etc-link");
  std::filesystem::create_directories(node.dir + "/jobs/00000000000000aa");
  testing::write_text(node.dir + "/jobs/00000000000000aa/their.csv", "1,2,0\n");
  const std::string outside = "is outside the folders the nodes read job data from (data_roots: " +
                              data + ")";
  auto csv_job = [&](const std::string& path) {
    return node.start(node.spec(1, "  train: {format: csv, path: " + path + "}\n"));
  };
  const std::pair<std::string, std::string> refused[] = {
      {"/etc/passwd", outside},
      {data + "/etc-link/passwd", outside},      // a link does not lead out
      {data + "/../jobs/00000000000000aa/their.csv", outside},  // nor '..'
      {data + "/no-such.csv", "cannot read file"},  // inside: looked up as usual
  };
  uint64_t job = 30;
  for (const auto& [path, error] : refused) {
    const std::string failure = failure_of(node, ++job, csv_job(path));
    CHECK_THAT(failure, Catch::Contains(error));
    CHECK_THAT(failure, !Catch::Contains("root:"));  // nothing of /etc/passwd
  }
  // A wildcard in a pattern's folder could reach into any folder: refused.
  CHECK_THAT(failure_of(node, ++job,
                        node.start(node.spec(1, "  train: {format: packed, path: '" + node.dir +
                                                    "/job?/00000000000000aa/*.dtb'}\n"))),
             Catch::Contains("has wildcards in its folder"));
  // A node-local shard that the pattern matches inside the roots but that links out of them:
  // refused before it is read.
  std::filesystem::create_directories(data + "/shards");
  write_shard(node.dir + "/elsewhere.dtb");
  std::filesystem::create_symlink(node.dir + "/elsewhere.dtb", data + "/shards/node-a-0.dtb");
  CHECK_THAT(failure_of(node, ++job,
                        node.start(node.spec(1, "  train: {format: packed, shards: \"" + data +
                                                    "/shards/{node}-*.dtb\"}\n"))),
             Catch::Contains(data + "/shards/node-a-0.dtb' is outside the folders"));
  // data_dir's jobs/ is never an input, even where data_roots holds data_dir.
  node.config.data_roots = {node.dir};
  CHECK_THAT(failure_of(node, ++job, csv_job(node.dir + "/jobs/00000000000000aa/their.csv")),
             Catch::Contains("is outside the folders"));
  // Unless the controller says this job may read that one's folder (its owner may).
  testing::write_text(node.dir + "/jobs/00000000000000aa/their.csv",
                      std::string(std::istreambuf_iterator<char>(std::ifstream(csv).rdbuf()), {}));
  StartMessage granted = csv_job(node.dir + "/jobs/00000000000000aa/their.csv");
  granted.readable_jobs = {0xaa};
  CHECK(failure_of(node, ++job, granted).empty());
  CHECK(job_of_folder_path("/d/jobs/00000000000000aa/m.dtm") == std::optional<uint64_t>(0xaa));
  CHECK(job_of_folder_path("/d/x/../jobs/./00000000000000ab/m.dtm") ==
        std::optional<uint64_t>(0xab));
  CHECK_FALSE(job_of_folder_path("/d/models/m.dtm").has_value());
  CHECK(failure_of(node, ++job, csv_job(csv)).empty());
}

TEST_CASE("a part whose data would take more memory than a job may hold fails, naming both") {
  NodeUnderTest node;
  node.config.job_memory_mb = 1;
  const std::string csv = node.dir + "/big.csv";
  {
    std::ofstream out(csv);
    for (int row = 0; row < 50000; ++row) out << "0.5,0.25,0.125,1.0," << row % 2 << "\n";
  }
  Reports reports;
  JobRunner runner(node.config, *node.channel, kSelf, 12,
                   node.start(node.spec(1, "  train: {format: csv, path: " + csv + "}\n")),
                   reports.sink());
  REQUIRE(wait_for([&] { return runner.done(); }, 30s, "the part to end"));
  const auto failed = reports.of<FailedReport>();
  REQUIRE(failed.size() == 1);
  CHECK_THAT(failed[0].error, Catch::Contains("data.train would take about 3 MB in memory, more "
                                              "than the 1 MB a job may hold on this node"));
  CHECK_THAT(failed[0].fix, Catch::Contains("job_memory_mb"));
  CHECK(reports.of<ResultReport>().empty());
}

TEST_CASE("a cancelled part reports Failed, as cancelled") {
  NodeUnderTest node;
  Reports reports;
  const std::string csv = testing::write_separable_csv(node.dir);
  JobRunner runner(node.config, *node.channel, kSelf, 7,
                   node.start(node.spec(100000, "  train: {format: csv, path: " + csv + "}\n")),
                   reports.sink());
  REQUIRE(wait_for([&] { return !reports.of<ProgressReport>().empty(); }, 30s,
                   "the part's first progress report"));
  runner.cancel();
  REQUIRE(wait_for([&] { return runner.done(); }, 30s, "the cancelled part to end"));
  const auto failed = reports.of<FailedReport>();
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].cancelled);
  CHECK(reports.of<ResultReport>().empty());
}

TEST_CASE("a data plan naming a file this node did not list fails the part") {
  NodeUnderTest node;
  Reports reports;
  const std::string shards = node.dir + "/shards";
  std::filesystem::create_directories(shards);
  JobRunner runner(node.config, *node.channel, kSelf, 8,
                   node.start(node.spec(1, "  train: {format: packed, shards: \"" + shards +
                                               "/{node}-*.dtb\"}\n")),
                   reports.sink());
  REQUIRE(wait_for([&] { return !reports.of<ShardsReport>().empty(); }, 10s,
                   "the node's list of its files"));
  runner.plan({{"/etc/passwd"}, {10}});
  REQUIRE(wait_for([&] { return runner.done(); }, 10s, "the part to end"));
  const auto failed = reports.of<FailedReport>();
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].error == "the data plan names '/etc/passwd', which this node did not list");
}

TEST_CASE("a node joining a running job does not count its peers' silence while it loads data") {
  NodeUnderTest node;
  SilentPeer peer;
  const std::string shards = node.dir + "/shards";
  std::filesystem::create_directories(shards);
  write_shard(shards + "/node-a-0.dtb");
  StartMessage start = node.start(
      node.spec(1, "  train: {format: packed, shards: \"" + shards + "/{node}-*.dtb\"}\n"));
  JobMemberInfo live = start.members[0];
  live.id = 42;
  live.name = "node-b";
  live.port = peer.port;
  start.members.insert(start.members.begin(), live);  // the live node is rank 0, this one 1
  start.rank = 1;
  start.rejoin = start.joining = true;
  Reports reports;
  JobRunner runner(node.config, *node.channel, kSelf, 30, start, reports.sink());
  REQUIRE(wait_for([&] { return !reports.of<ShardsReport>().empty(); }, 10s,
                   "the node's list of its files"));
  // Its data comes later than the peer timeout (1 s): a slow load, or a slow controller.
  std::this_thread::sleep_for(2000ms);
  runner.plan({{shards + "/node-a-0.dtb"}, {64, 64}});
  REQUIRE(wait_for([&] { return !reports.of<AttachedReport>().empty(); }, 10s,
                   "the node to report it takes the job's datagrams"));
  // Only now are the others told of it; until they answer, their silence counts from here.
  const auto counters = node.channel->endpoint().counters();
  REQUIRE(counters.count(42) == 1);
  CHECK_FALSE(counters.at(42).lost);
  CHECK(reports.of<FailedReport>().empty());
  runner.cancel();
  REQUIRE(wait_for([&] { return runner.done(); }, 30s, "the cancelled part to end"));
}

}  // namespace dtrain::daemon
