// Cluster evaluation and inference jobs (docs/architecture/daemon.md, "Evaluation and inference
// jobs"): the split into parts of whole batches, the Task frame, the merging of parts (counts added
// in part order equal the whole's; part files joined into the one-machine file), and the
// controller's state machine with fake nodes: each node gets its share, a lost node's parts go
// to the others, a node cannot report a part it does not hold, and the merged counts are exact.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "core/data/part_range.h"
#include "core/eval/evaluation.h"
#include "daemon/controller/task_results.h"
#include "daemon/protocol/part_scores.h"
#include "daemon/protocol/shard_list.h"
#include "tests/wait_for.h"
#include "tests/unit/controller_harness.h"

using namespace dtrain;
using namespace dtrain::testing;
using namespace std::chrono_literals;

namespace {

// A part's evaluation of `rows` examples of 3 classes, the predictions following `seed`.
core::Evaluation part_eval(int64_t rows, int seed) {
  core::Evaluation e(3, 2);
  core::Tensor p({rows, 3});
  std::vector<int32_t> labels;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < 3; ++c) p[r * 3 + c] = float((r * 7 + c * 5 + seed) % 11);
    labels.push_back(int32_t((r + seed) % 3));
  }
  e.add(p, labels.data());
  e.add_loss(0.25 * (seed + 1), rows);
  return e;
}

daemon::PartDoneReport part_done(uint32_t part, const core::Evaluation& e) {
  daemon::PartDoneReport done;
  done.part_index = part;
  done.examples = e.count();
  done.counts = daemon::EvaluationCounts{e.loss_sum(), false, e.counts(), {}};
  return done;
}

daemon::TaskRequest task_request(daemon::TaskKind task, const std::string& path,
                                 const std::string& format = "") {
  daemon::TaskRequest r;
  r.task = task;
  r.path = path;
  r.format = format;
  return r;
}

// Submits a cluster eval/infer job with this model file, as dtrain-submit does.
daemon::Json submit_task(ControllerUnderTest& t, const daemon::TaskRequest& task,
                         std::vector<uint8_t> model) {
  daemon::ClientRequest q = daemon::client_request(daemon::RequestKind::Task);
  q.task = task;
  q.data = daemon::shared_bytes(std::move(model));
  auto c = t.as_alice();
  return daemon::request(*c, q, 5s);
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("parts are whole batches and cover every example once") {
  for (int64_t n : {0, 1, 255, 256, 257, 10000}) {
    for (int64_t batch : {1, 7, 256}) {
      for (int64_t parts : {1, 3, 12, 40}) {
        INFO("n " << n << " batch " << batch << " parts " << parts);
        int64_t next = 0;
        for (int64_t p = 0; p < parts; ++p) {
          const core::ExampleRange r = core::part_range(n, batch, p, parts);
          CHECK(r.begin == next);
          CHECK(r.size() >= 0);
          CHECK((r.begin % batch == 0 || r.begin == n));
          next = r.end;
        }
        CHECK(next == n);
      }
    }
  }
}

TEST_CASE("a Task frame round trips and a forged one is refused") {
  daemon::TaskMessage t;
  t.kind = daemon::TaskKind::Infer;
  t.model = {1, 2, 3};
  t.format = "csv";
  t.path = "/data/x.csv";
  t.key_column = 0;
  t.header = true;
  t.batch_size = 64;
  t.output_dir = "/out";
  t.parts = {1, 4};
  t.part_count = 6;
  daemon::JobMessageIn in;
  REQUIRE(daemon::read_job_message(daemon::task_frame(5, t), in));
  CHECK(in.kind == daemon::JobKind::Task);
  CHECK(in.task.model == t.model);
  CHECK(in.task.parts == t.parts);
  CHECK(in.task.part_count == 6);
  CHECK(in.task.key_column == 0);
  CHECK(in.task.output_dir == "/out");
  t.parts = {6};  // past part_count
  CHECK_FALSE(daemon::read_job_message(daemon::task_frame(5, t), in));
  t.parts = {0};
  t.kind = daemon::TaskKind::Unknown;
  CHECK_FALSE(daemon::read_job_message(daemon::task_frame(5, t), in));
  // Node-local: no part count before the plan, then a file per part; files without shards,
  // or a count that does not match the parts, are refused.
  t.kind = daemon::TaskKind::Eval;
  t.shards = "/data/{node}/test-*.dtb";
  t.parts = {};
  t.part_count = 0;
  REQUIRE(daemon::read_job_message(daemon::task_frame(5, t), in));
  CHECK(in.task.shards == t.shards);
  t.parts = {2, 0};
  t.part_count = 3;
  t.part_files = {"/data/n/test-00002.dtb", "/data/n/test-00000.dtb"};
  REQUIRE(daemon::read_job_message(daemon::task_frame(5, t), in));
  CHECK(in.task.part_files == t.part_files);
  t.part_files.pop_back();
  CHECK_FALSE(daemon::read_job_message(daemon::task_frame(5, t), in));
  t.shards.clear();
  t.part_files = {"/a", "/b"};
  CHECK_FALSE(daemon::read_job_message(daemon::task_frame(5, t), in));
  t.part_files.clear();
  t.parts = {};
  t.part_count = 0;  // no parts and no shards: nothing to do
  CHECK_FALSE(daemon::read_job_message(daemon::task_frame(5, t), in));
}

TEST_CASE("evaluation parts merge into the whole's counts; bad reports are named") {
  std::map<uint32_t, daemon::Json> parts;
  core::Evaluation whole;
  for (uint32_t p = 0; p < 5; ++p) {
    const core::Evaluation e = part_eval(40 + p, int(p));
    parts[p] = daemon::part_done_json(part_done(p, e));
    whole.merge(e);
  }
  const daemon::Json merged = daemon::merge_eval_parts(parts);
  CHECK(merged["counts"].get<std::vector<int64_t>>() == whole.counts());
  CHECK(merged["accuracy"].get<double>() == whole.accuracy());
  CHECK(merged["evaluated_examples"].get<int64_t>() == whole.count());
  CHECK(daemon::check_part_done(daemon::TaskKind::Eval, parts[2], 2, "") == "");
  daemon::Json lying = parts[2];
  lying["examples"] = 7;
  CHECK(daemon::check_part_done(daemon::TaskKind::Eval, lying, 2, "") == "counts that do not add up to its examples");
  lying = parts[2];
  lying["counts"] = std::vector<int64_t>{3, 2, 1};
  CHECK(daemon::check_part_done(daemon::TaskKind::Eval, lying, 2, "") == "malformed counts");
  parts[3]["counts"] = part_eval(10, 1).counts();  // a different shape than the rest? same: ok
  CHECK_NOTHROW(daemon::merge_eval_parts(parts));
  core::Evaluation wide(4, 2);
  parts[3] = daemon::part_done_json(part_done(3, wide));
  CHECK_THROWS_WITH(daemon::merge_eval_parts(parts), Catch::Contains("different kinds"));
}

TEST_CASE("parts' ROC scores merge into the whole's AUCs and curves; malformed ones are refused") {
  const std::string dir = temp_dir();
  core::RocOneVsAll whole(3);
  std::map<uint32_t, daemon::Json> parts;
  for (uint32_t p = 0; p < 4; ++p) {
    const int64_t rows = 25 + p;
    std::vector<float> probs;
    std::vector<int32_t> labels;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < 3; ++c) probs.push_back(float((r * 13 + c * 7 + p) % 10) / 10);
      labels.push_back(int32_t((r + p) % 3));
    }
    core::RocOneVsAll part(3);
    part.add(probs.data(), labels.data(), rows);
    whole.add(probs.data(), labels.data(), rows);
    core::Evaluation e(3, 1);
    core::Tensor t({rows, 3});
    std::copy(probs.begin(), probs.end(), t.data());
    e.add(t, labels.data());
    daemon::PartDoneReport done = part_done(p, e);
    done.roc = daemon::part_scores(part);
    parts[p] = daemon::part_done_json(done);
    CHECK(daemon::check_part_done(daemon::TaskKind::Eval, parts[p], p, "") == "");
  }
  const daemon::Json merged = daemon::merge_eval_parts(
      parts, {{"roc_csv", dir + "/roc.csv"}, {"roc_classes", {"a", "b", "c"}}});
  for (int64_t c = 0; c < 3; ++c) CHECK(merged["auc"][size_t(c)].get<double>() == whole.of(c).auc());
  CHECK(merged["macro_auc"].get<double>() == whole.macro_auc());
  CHECK(read(dir + "/roc.csv") == whole.curves_csv({"a", "b", "c"}));
  daemon::Json bad = parts[1];
  bad["roc"]["labels"] = "AAAA";  // too short for its rows
  CHECK(daemon::check_part_done(daemon::TaskKind::Eval, bad, 1, "") == "malformed ROC scores");
  bad = parts[1];
  bad["roc"]["rows"] = 1 << 30;  // more than the part's examples, and than the bound
  CHECK(daemon::check_part_done(daemon::TaskKind::Eval, bad, 1, "") == "malformed ROC scores");
  parts[2].erase("roc");
  CHECK_THROWS_WITH(daemon::merge_eval_parts(parts), Catch::Contains("without its ROC scores"));
}

TEST_CASE("inference part files join in part order under one header, or stay with --parts") {
  const std::string dir = temp_dir();
  std::map<uint32_t, daemon::Json> parts;
  for (uint32_t p : {2u, 0u, 1u}) {  // reported out of order
    std::ofstream(daemon::part_file(dir, p)) << "key,predicted\n" << "k" << p << "a,1\nk" << p << "b,0\n";
    parts[p] = {{"part_index", p}, {"examples", 2}, {"file", daemon::part_file(dir, p)}};
    CHECK(daemon::check_part_done(daemon::TaskKind::Infer, parts[p], p, dir) == "");
  }
  std::ofstream(daemon::part_file(dir, 3)) << "key,predicted\n";  // a part of no examples
  parts[3] = {{"part_index", 3}, {"examples", 0}, {"file", daemon::part_file(dir, 3)}};
  CHECK(daemon::check_part_done(daemon::TaskKind::Infer, parts[1], 2, dir) == "not its own part file");
  const daemon::Json kept = daemon::merge_infer_parts(parts, dir, true);
  CHECK(kept["files"].size() == 4);
  CHECK(std::filesystem::exists(daemon::part_file(dir, 0)));
  const daemon::Json joined = daemon::merge_infer_parts(parts, dir, false);
  CHECK(joined["rows"] == 6);
  CHECK(read(dir + "/predictions.csv") == "key,predicted\nk0a,1\nk0b,0\nk1a,1\nk1b,0\nk2a,1\nk2b,0\n");
  CHECK_FALSE(std::filesystem::exists(daemon::part_file(dir, 1)));
  std::ofstream(daemon::part_file(dir, 0)) << "key,other\nx,1\n";
  std::ofstream(daemon::part_file(dir, 1)) << "key,predicted\ny,1\n";
  std::map<uint32_t, daemon::Json> two = {{0, parts[0]}, {1, parts[1]}};
  CHECK_THROWS_WITH(daemon::merge_infer_parts(two, dir, false), Catch::Contains("another header"));
}

TEST_CASE("a link planted in the output folder is not followed, read or written through") {
  namespace fs = std::filesystem;
  const std::string dir = temp_dir(), elsewhere = temp_dir();
  std::ofstream(elsewhere + "/victim") << "keep me\n";
  std::ofstream(elsewhere + "/secret") << "key,predicted\nsecret,1\n";
  std::map<uint32_t, daemon::Json> parts;
  std::ofstream(daemon::part_file(dir, 0)) << "key,predicted\na,1\n";
  parts[0] = {{"part_index", 0}, {"examples", 1}, {"file", daemon::part_file(dir, 0)}};
  // predictions.csv planted as a link to a file elsewhere: replaced, the target untouched.
  fs::create_symlink(elsewhere + "/victim", dir + "/predictions.csv");
  daemon::merge_infer_parts(parts, dir, false);
  CHECK_FALSE(fs::is_symlink(dir + "/predictions.csv"));
  CHECK(read(dir + "/predictions.csv") == "key,predicted\na,1\n");
  CHECK(read(elsewhere + "/victim") == "keep me\n");
  // A part file that is a link (to a secret) is not read.
  fs::create_symlink(elsewhere + "/secret", daemon::part_file(dir, 0));
  CHECK_THROWS_WITH(daemon::merge_infer_parts(parts, dir, false), Catch::Contains("cannot read the part file"));
  // A folder on the way that is a link: refused.
  fs::create_symlink(elsewhere, dir + "/linked");
  CHECK_THROWS_WITH(daemon::merge_infer_parts(parts, dir + "/linked", false),
                    Catch::Contains("a symbolic link or not a folder"));
}

TEST_CASE("the controller splits a task, gives a lost node's parts to another and merges exactly",
          "[controller]") {
  ControllerUnderTest t;
  FakeNode a(t, node_named("node-a", 1));
  auto b = std::make_unique<FakeNode>(t, node_named("node-b", 2));
  daemon::TaskRequest request = task_request(daemon::TaskKind::Eval, "/data/test.csv", "csv");
  request.name = "m-eval";
  request.top_n = 2;
  const daemon::Json job = submit_task(t, request, {9, 9, 9});
  uint64_t id = 0;
  REQUIRE(daemon::parse_job_id(job.at("id").get<std::string>(), id));
  const daemon::JobMessageIn to_a = a.next(), to_b = b->next();
  REQUIRE(to_a.kind == daemon::JobKind::Task);
  REQUIRE(to_b.kind == daemon::JobKind::Task);
  CHECK(to_a.task.model == std::vector<uint8_t>{9, 9, 9});
  const uint32_t count = to_a.task.part_count;
  std::set<uint32_t> all(to_a.task.parts.begin(), to_a.task.parts.end());
  all.insert(to_b.task.parts.begin(), to_b.task.parts.end());
  REQUIRE(all.size() == count);  // every part given to exactly one node
  REQUIRE(to_a.task.parts.size() + to_b.task.parts.size() == count);

  core::Evaluation whole;
  for (uint32_t p = 0; p < count; ++p) whole.merge(part_eval(30 + p, int(p)));
  // node-a may not report node-b's part: ignored, the job goes on.
  a.send(id, part_done(to_b.task.parts[0], part_eval(30 + to_b.task.parts[0], int(to_b.task.parts[0]))));
  for (uint32_t p : to_a.task.parts) a.send(id, part_done(p, part_eval(30 + p, int(p))));
  b.reset();  // node-b's connection ends before it reported anything: lost
  const daemon::JobMessageIn more = a.next();
  REQUIRE(more.kind == daemon::JobKind::Task);
  CHECK(more.task.parts == to_b.task.parts);
  for (uint32_t p : more.task.parts) a.send(id, part_done(p, part_eval(30 + p, int(p))));
  CHECK(a.next().kind == daemon::JobKind::Cancel);  // the job is over: the runners stop
  const daemon::Json status = t.job(id);
  REQUIRE(status["state"] == "succeeded");
  CHECK(status["result"]["counts"].get<std::vector<int64_t>>() == whole.counts());
  CHECK(status["task_parts"]["done"] == count);
  CHECK(status["lost_nodes"] == daemon::Json::array({"node-b"}));
}

TEST_CASE("a task's node failure fails the job with its reason; cancel ends a running task",
          "[controller]") {
  ControllerUnderTest t;
  FakeNode a(t, node_named("node-a", 1));
  const std::string out = t.config.task_outputs[0];
  auto submit = [&](const std::string& path) {
    daemon::TaskRequest infer = task_request(daemon::TaskKind::Infer, path);
    infer.output_dir = out;
    const daemon::Json job = submit_task(t, infer, {1});
    uint64_t id = 0;
    REQUIRE(daemon::parse_job_id(job.at("id").get<std::string>(), id));
    REQUIRE(a.next().kind == daemon::JobKind::Task);
    return id;
  };
  const uint64_t failing = submit("/data/in.csv");
  a.send(failing, daemon::FailedReport{-1, "cannot open '/data/in.csv'", "check the path", false});
  CHECK(a.next().kind == daemon::JobKind::Cancel);
  daemon::Json status = t.job(failing);
  CHECK(status["state"] == "failed");
  CHECK(status["error"] == "node-a: cannot open '/data/in.csv'");
  CHECK(status["fix"] == "check the path");

  const uint64_t cancelled = submit("/data/in.csv");
  t.ask(daemon::RequestKind::Cancel, cancelled);
  CHECK(a.next().kind == daemon::JobKind::Cancel);
  CHECK(t.job(cancelled)["state"] == "cancelled");

  // Refused at submission, naming the field, and nothing queued: a relative path, no model,
  // figures out of range, texts too long or not printable, more nodes than registered, output
  // outside task_outputs (or inside the data directory, or through '..').
  auto refused = [&](const daemon::TaskRequest& task, const std::string& why,
                     std::vector<uint8_t> model = {1}) {
    INFO(daemon::task_kind_word(task.task) << " " << task.path << ": " << why);
    CHECK_THROWS_WITH(submit_task(t, task, model), Catch::Contains(why));
  };
  daemon::TaskRequest infer = task_request(daemon::TaskKind::Infer, "/in.csv");
  infer.output_dir = out;
  const daemon::TaskRequest eval = task_request(daemon::TaskKind::Eval, "/d.csv", "csv");
  const size_t jobs_before = t.ask(daemon::RequestKind::Status)["jobs"].size();
  daemon::TaskRequest relative = infer;
  relative.path = "in.csv";
  refused(relative, "not absolute");
  refused(eval, "no model", {});
  daemon::TaskRequest bad = infer;
  bad.nodes = -1;
  refused(bad, "nodes is not a whole number from 0 to 4096");
  bad = infer;
  bad.name = std::string(201, 'n');
  refused(bad, "name is not a text of at most 200 printable characters");
  bad = infer;
  bad.key_column = -2;
  refused(bad, "key_column");
  bad = infer;
  bad.task = daemon::TaskKind(7);  // of a later release
  refused(bad, "unknown task (7), neither eval nor infer");
  daemon::TaskRequest many = infer;
  many.nodes = 2;
  refused(many, "it asks for 2 nodes, 1 are registered");
  daemon::TaskRequest big = infer;
  big.batch_size = 1 << 20;
  refused(big, "batch_size is not a whole number from 1 to 8192");
  for (const std::string& place : {std::string("/etc"), out + "/../x", t.config.data_dir}) {
    daemon::TaskRequest elsewhere = infer;
    elsewhere.output_dir = place;
    refused(elsewhere, "task_outputs");
  }
  daemon::TaskRequest roc = eval;
  roc.metrics = {"roc"};
  roc.roc_csv = "/etc/roc.csv";
  refused(roc, "not inside a task_outputs folder");
  daemon::TaskRequest unknown_metric = eval;
  unknown_metric.metrics = {"f1"};
  refused(unknown_metric, "unknown metric 'f1'");
  roc.roc_csv = out;
  refused(roc, "is a folder");
  roc.roc_csv = out + "/roc.csv";
  roc.roc_classes = {"a\nb"};
  refused(roc, "roc_classes");
  CHECK(t.ask(daemon::RequestKind::Status)["jobs"].size() == jobs_before);
}

TEST_CASE("each task writes into a folder of its own; one whose folder exists fails, naming it",
          "[controller]") {
  ControllerUnderTest t;
  const std::string out = t.config.task_outputs[0] + "/shared";
  std::filesystem::create_directories(out);
  // A shared folder the nodes write into as another user: group-writable; each task's folder
  // gets the same permissions (not the daemon's umask's).
  std::filesystem::permissions(out, std::filesystem::perms(0775));
  auto submit = [&](daemon::TaskRequest request) {
    const daemon::Json job = submit_task(t, request, {1});
    uint64_t id = 0;
    REQUIRE(daemon::parse_job_id(job.at("id").get<std::string>(), id));
    return id;
  };
  daemon::TaskRequest infer = task_request(daemon::TaskKind::Infer, "/data/in.csv");
  infer.output_dir = out;
  // Queued (no node yet), its folder taken meanwhile by a link to a folder elsewhere: when it
  // starts it fails naming the folder, nothing is written through the link, the queue goes on.
  const uint64_t taken = submit(infer);
  const std::string elsewhere = testing::temp_dir();
  std::filesystem::create_directory_symlink(elsewhere, out + "/" + daemon::job_id_text(taken));
  FakeNode a(t, node_named("node-a", 1));
  REQUIRE(wait_for([&] { return t.job(taken)["state"] == "failed"; }, 5s, "the job to fail"));
  CHECK_THAT(t.job(taken)["error"].get<std::string>(),
             Catch::Contains(daemon::job_id_text(taken) + "': it exists already"));
  CHECK(std::filesystem::is_empty(elsewhere));

  std::set<std::string> folders;
  for (int k = 0; k < 2; ++k) {  // the same output folder twice
    const uint64_t id = submit(infer);
    const daemon::JobMessageIn in = a.next();
    REQUIRE(in.kind == daemon::JobKind::Task);
    CHECK(in.task.output_dir == out + "/" + daemon::job_id_text(id));
    CHECK(std::filesystem::is_directory(in.task.output_dir));
    CHECK(std::filesystem::status(in.task.output_dir).permissions() ==
          std::filesystem::perms(0775));
    folders.insert(in.task.output_dir);
    a.send(id, daemon::FailedReport{-1, "stop here", "", false});
    CHECK(a.next().kind == daemon::JobKind::Cancel);
  }
  CHECK(folders.size() == 2);

  daemon::TaskRequest roc = task_request(daemon::TaskKind::Eval, "/d.csv", "csv");
  roc.metrics = {"roc"};
  roc.roc_csv = out + "/roc.csv";
  const uint64_t eval = submit(roc);
  REQUIRE(a.next().kind == daemon::JobKind::Task);
  CHECK(t.job(eval)["task_request"]["roc_csv"] ==
        out + "/" + daemon::job_id_text(eval) + "/roc.csv");
  CHECK(std::filesystem::is_directory(out + "/" + daemon::job_id_text(eval)));
}

TEST_CASE("a node registering again from the same process gets its unfinished parts again",
          "[controller]") {
  ControllerUnderTest t;
  auto a = std::make_unique<FakeNode>(t, node_named("node-a", 1));
  const daemon::Json job = submit_task(t, task_request(daemon::TaskKind::Eval, "/d.csv", "csv"), {1});
  uint64_t id = 0;
  REQUIRE(daemon::parse_job_id(job.at("id").get<std::string>(), id));
  const daemon::JobMessageIn first = a->next();
  REQUIRE(first.task.parts.size() == 4);
  a->send(id, part_done(first.task.parts[0], part_eval(30, 0)));
  // Taken before the node registers again.
  REQUIRE(wait_for([&] { return t.job(id)["task_parts"]["done"] == 1; }, 2s, "part 1 counted"));
  FakeNode again(t, node_named("node-a", 1));  // the same boot: a new session of one process
  const daemon::JobMessageIn resent = again.next();
  REQUIRE(resent.kind == daemon::JobKind::Task);
  CHECK(resent.task.parts == std::vector<uint32_t>(first.task.parts.begin() + 1, first.task.parts.end()));
  CHECK(t.job(id)["state"] == "running");
}

namespace {

daemon::ShardsReport shard_list(const std::string& node, std::vector<int> files) {
  std::vector<daemon::ShardFile> out;
  for (int k : files)
    out.push_back({"/data/" + node + "/test-0000" + std::to_string(k) + ".dtb", 100, 400, 7});
  return {out};
}

}  // namespace

TEST_CASE("a node-local evaluation: parts once every node has listed, a lost node's files "
          "redone by another holder, a file nobody else holds fails the job by name",
          "[controller]") {
  ControllerUnderTest t;
  FakeNode a(t, node_named("node-a", 1));
  auto b = std::make_unique<FakeNode>(t, node_named("node-b", 2));
  daemon::TaskRequest request = task_request(daemon::TaskKind::Eval, "", "packed");
  request.shards = "/data/{node}/test-*.dtb";
  auto submit = [&] {
    const daemon::Json job = submit_task(t, request, {9});
    uint64_t id = 0;
    REQUIRE(daemon::parse_job_id(job.at("id").get<std::string>(), id));
    return id;
  };
  const uint64_t id = submit();
  // First each node is asked for its list: no parts yet.
  const daemon::JobMessageIn ask_a = a.next(), ask_b = b->next();
  REQUIRE(ask_a.kind == daemon::JobKind::Task);
  CHECK(ask_a.task.shards == "/data/{node}/test-*.dtb");
  CHECK(ask_a.task.part_count == 0);
  CHECK(ask_a.task.parts.empty());
  CHECK(ask_b.task.part_count == 0);
  // node-a holds files 0-2, node-b a copy of 2 and file 3.
  a.send(id, shard_list("node-a", {0, 1, 2}));
  CHECK(a.quiet_for(300ms));  // the plan waits for node-b's list
  b->send(id, shard_list("node-b", {2, 3}));
  const daemon::JobMessageIn to_a = a.next(), to_b = b->next();
  REQUIRE(to_a.kind == daemon::JobKind::Task);
  REQUIRE(to_b.kind == daemon::JobKind::Task);
  CHECK(to_a.task.part_count == 4);
  CHECK(to_a.task.parts.size() == 2);  // 400 examples, 200 each
  CHECK(to_b.task.parts.size() == 2);
  REQUIRE(to_b.task.part_files.size() == 2);
  for (size_t i = 0; i < to_b.task.parts.size(); ++i)  // its own paths, part k = file k
    CHECK(to_b.task.part_files[i] ==
          "/data/node-b/test-0000" + std::to_string(to_b.task.parts[i]) + ".dtb");
  // node-b evaluated file 3 only it holds, then is lost: file 2 goes to node-a.
  core::Evaluation whole;
  for (uint32_t p = 0; p < 4; ++p) whole.merge(part_eval(100, int(p)));
  for (uint32_t p : to_a.task.parts) a.send(id, part_done(p, part_eval(100, int(p))));
  b->send(id, part_done(3, part_eval(100, 3)));
  // Its report is in before its connection ends.
  REQUIRE(wait_for([&] { return t.job(id)["task_parts"]["done"] == 3; }, 5s, "3 parts counted"));
  b.reset();
  const daemon::JobMessageIn more = a.next();
  REQUIRE(more.kind == daemon::JobKind::Task);
  CHECK(more.task.parts == std::vector<uint32_t>{2});
  CHECK(more.task.part_files == std::vector<std::string>{"/data/node-a/test-00002.dtb"});
  a.send(id, part_done(2, part_eval(100, 2)));
  CHECK(a.next().kind == daemon::JobKind::Cancel);
  daemon::Json status = t.job(id);
  REQUIRE(status["state"] == "succeeded");
  CHECK(status["result"]["counts"].get<std::vector<int64_t>>() == whole.counts());

  // Again with node-c holding file 3 alone, lost before it evaluated it: the job fails naming it.
  auto c = std::make_unique<FakeNode>(t, node_named("node-c", 3));
  const uint64_t second = submit();
  REQUIRE(a.next().kind == daemon::JobKind::Task);
  REQUIRE(c->next().kind == daemon::JobKind::Task);
  a.send(second, shard_list("node-a", {0, 1, 2}));
  c->send(second, shard_list("node-c", {3}));
  REQUIRE(a.next().kind == daemon::JobKind::Task);
  REQUIRE(c->next().task.parts == std::vector<uint32_t>{3});
  c.reset();
  CHECK(a.next().kind == daemon::JobKind::Cancel);
  status = t.job(second);
  CHECK(status["state"] == "failed");
  CHECK(status["error"] == "part 4 (/data/node-c/test-00003.dtb, 100 examples) is held only by "
                           "node-c, which was lost");

  // A pattern that matches nothing anywhere, or a share of the export: refused by name.
  const uint64_t third = submit();
  REQUIRE(a.next().kind == daemon::JobKind::Task);
  a.send(third, shard_list("node-a", {0, 1}));
  CHECK(a.next().kind == daemon::JobKind::Cancel);
  status = t.job(third);
  CHECK(status["error"] == "--shards: the nodes hold 200 of the export's 400 examples");

  // A part whose file changed after it was listed (other examples than listed): refused.
  const uint64_t fourth = submit();
  REQUIRE(a.next().kind == daemon::JobKind::Task);
  a.send(fourth, shard_list("node-a", {0, 1, 2, 3}));
  REQUIRE(a.next().task.parts.size() == 4);
  a.send(fourth, part_done(0, part_eval(99, 0)));
  CHECK(a.next().kind == daemon::JobKind::Cancel);
  status = t.job(fourth);
  CHECK(status["state"] == "failed");
  CHECK(status["error"] == "node-a evaluated 99 examples for part 1, whose file held 100 when it "
                           "was listed");
}

TEST_CASE("with as many tasks unfinished as the controller holds, another is refused before its "
          "model is sent", "[controller]") {
  ControllerUnderTest t;
  FakeNode a(t, node_named("node-a", 1));  // runs the first; the others queue behind it
  for (int i = 0; i < 8; ++i) {
    daemon::TaskRequest request = task_request(daemon::TaskKind::Eval, "/data/test.csv", "csv");
    request.name = "eval-" + std::to_string(i);
    REQUIRE(submit_task(t, request, {9, 9, 9}).contains("id"));
  }
  // The ninth announces its model and never sends it: the answer comes at once, not after the
  // 60 s the controller would wait for the model.
  daemon::ClientRequest q = daemon::client_request(daemon::RequestKind::Task);
  q.task = task_request(daemon::TaskKind::Eval, "/data/test.csv", "csv");
  q.data = daemon::shared_bytes({9, 9, 9});
  auto c = t.as_alice();
  c->send(daemon::request_frame(q), 5s);
  const std::vector<uint8_t> reply = c->receive(5s);
  const daemon::control::Reply* r = daemon::read_control_frame(reply).body_as_Reply();
  REQUIRE(r);
  CHECK_FALSE(r->ok());
  CHECK(std::string(r->error() ? r->error()->c_str() : "") ==
        "8 evaluation or inference jobs are queued or running already");
}
