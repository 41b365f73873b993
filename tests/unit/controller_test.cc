// The controller's job queue and its view of nodes, in one process over a real loopback
// control channel with fake nodes (tests/unit/controller_harness.h): jobs start one at a time
// in the order submitted; a cancelled queued job never starts; a job waits for its
// `training.nodes`; a restarted controller adopts the running job, keeps queued ones queued and
// stops orphans (the SIGKILL case is tests/cluster/controller_restart_test); a silent node is lost
// at the peer timeout while one that heartbeats is not; and a node registering again while its old
// session lives replaces that session (a restarted daemon rejoins the running job); a node back
// from a pause is taken back or told to stop, and its old part's reports do not count; a node
// cannot report for a job it is not a member of.
#include <catch2/catch.hpp>

#include <filesystem>
#include <thread>

#include "tests/unit/controller_harness.h"
#include "tests/wait_for.h"

using namespace dtrain;
using namespace dtrain::testing;
using namespace std::chrono_literals;

namespace {

std::string spec(const std::string& name, int nodes,
                 const std::string& mode = "gradient_sharing") {
  return "name: " + name +
         "\nmodel:\n  input: [4]\n  layers:\n"
         "    - output: {units: 3, activation: softmax, loss: mcxent}\n"
         "data:\n  train: {format: csv, path: none.csv}\n"
         "training:\n  mode: " + mode + "\n  nodes: " + std::to_string(nodes) + "\n";
}

uint64_t submit(ControllerUnderTest& t, const std::string& name, int nodes = 1,
                const std::string& mode = "gradient_sharing") {
  const daemon::Json job =
      t.submit_spec(spec(name, nodes, mode), name);
  uint64_t id = 0;
  REQUIRE(daemon::parse_job_id(job.at("id").get<std::string>(), id));
  return id;
}

std::string state(ControllerUnderTest& t, uint64_t id) {
  return t.job(id).at("state").get<std::string>();
}

bool alive(ControllerUnderTest& t, const std::string& node) {
  const daemon::Json nodes = t.ask(daemon::RequestKind::Nodes);  // kept: a loop over a temporary's member dangles
  for (const auto& n : nodes.at("nodes"))
    if (n.value("name", "") == node) return n.value("state", "") == "alive";
  return false;
}

// A job with nodes: {min: 2, max: 3} and `workers` per node.
uint64_t submit_elastic(ControllerUnderTest& t, int workers) {
  const std::string text = "name: elastic\nmodel:\n  input: [4]\n  layers:\n"
                           "    - output: {units: 3, activation: softmax, loss: mcxent}\n"
                           "data:\n  train: {format: csv, path: none.csv}\n"
                           "training:\n  nodes: {min: 2, max: 3}\n  workers_per_node: " +
                           std::to_string(workers) + "\n";
  const daemon::Json job = t.submit_spec(text, "elastic");
  uint64_t id = 0;
  REQUIRE(daemon::parse_job_id(job.at("id").get<std::string>(), id));
  return id;
}

uint64_t submit_text(ControllerUnderTest& t, const std::string& text) {
  const daemon::Json submitted = t.submit_spec(text, "test");
  uint64_t id = 0;
  REQUIRE(daemon::parse_job_id(submitted.at("id").get<std::string>(), id));
  return id;
}

// node-a (id 1, boot 1) is silent past the peer timeout while `other` heartbeats, then the same
// process registers again, still running job `id` (a pause).
std::unique_ptr<FakeNode> paused_and_back(ControllerUnderTest& t, FakeNode& other, uint64_t id) {
  CHECK(testing::wait_for(
      [&] {
        other.heartbeat();
        return !alive(t, "node-a");
      },
      5000ms, "node-a to be lost"));
  daemon::NodeRegistration same = node_named("node-a", 1, /*boot=*/1);
  same.running_jobs = {id};
  return std::make_unique<FakeNode>(t, same);
}

// A node ends its part of a job (the fake nodes train nothing: they report a failure).
void end_job(FakeNode& node, uint64_t id) {
  node.send(id, daemon::FailedReport{0, "ended by the test", "", false});
}

}  // namespace

TEST_CASE("jobs start one at a time in the order submitted; a cancelled queued one never does",
          "[controller]") {
  ControllerUnderTest t;
  FakeNode node(t, node_named("node-a", 1));
  const uint64_t a = submit(t, "a"), b = submit(t, "b"), c = submit(t, "c");
  daemon::JobMessageIn m = node.next();
  CHECK(m.kind == daemon::JobKind::Start);
  CHECK(m.job_id == a);
  CHECK(state(t, a) == "running");
  CHECK(state(t, b) == "queued");
  CHECK(state(t, c) == "queued");
  CHECK_FALSE(t.ask(daemon::RequestKind::Cancel, b).value("already_ended", false));
  CHECK(state(t, b) == "cancelled");
  CHECK(node.quiet_for(300ms));  // nothing else starts while a runs
  end_job(node, a);
  m = node.next();
  CHECK(m.kind == daemon::JobKind::Start);
  CHECK(m.job_id == c);  // b was cancelled while queued
  CHECK(testing::wait_for([&] { return state(t, a) == "failed"; }, 5000ms, "job a to fail"));
  CHECK(t.ask(daemon::RequestKind::Cancel, a).value("already_ended", false));  // an ended job is left as it ended
  CHECK(state(t, a) == "failed");
  CHECK(t.job(b).at("nodes").empty());
  CHECK(state(t, c) == "running");
}

TEST_CASE("a job waits for its training.nodes, then starts on all of them", "[controller]") {
  ControllerUnderTest t;
  FakeNode first(t, node_named("node-a", 1));
  const uint64_t id = submit(t, "two", 2);
  CHECK(first.quiet_for(300ms));
  const daemon::Json waiting = t.ask(daemon::RequestKind::Logs, id);
  CHECK(waiting.at("log").dump().find("waiting for 2 nodes (1 registered)") != std::string::npos);
  CHECK(state(t, id) == "queued");
  FakeNode second(t, node_named("node-b", 2));
  const daemon::JobMessageIn ma = first.next(), mb = second.next();
  CHECK(ma.kind == daemon::JobKind::Start);
  CHECK(mb.kind == daemon::JobKind::Start);
  CHECK(ma.start.rank == 0);  // ranks follow node ids
  CHECK(mb.start.rank == 1);
  REQUIRE(ma.start.members.size() == 2);
  CHECK(ma.start.members[0].name == "node-a");
  CHECK(ma.start.members[1].boot == 1);  // each member's registered boot
  CHECK(t.job(id).at("nodes") == daemon::Json({"node-a", "node-b"}));
}

// A job record as a controller killed mid-job left it on disk.
daemon::JobRecord record(uint64_t id, const std::string& name, const std::string& state_name,
                         const std::vector<std::string>& nodes) {
  daemon::JobRecord r;
  r.id = id;
  r.name = name;
  r.owner = "alice";  // the harness's client
  r.state = daemon::parse_job_state(state_name).value();
  r.mode = "gradient_sharing";
  r.spec_text = spec(name, std::max(1, int(nodes.size())));
  r.nodes = nodes;
  uint32_t node_id = 1;
  for (const std::string& n : nodes)
    r.members.push_back({{"id", node_id++}, {"name", n}, {"boot", 1}, {"address", "127.0.0.1"},
                         {"port", 40123}, {"workers", 1}, {"device", "cpu"}});
  return r;
}

TEST_CASE("a restarted controller adopts the running job; queued jobs wait; orphans are stopped",
          "[controller]") {
  const std::string dir = temp_dir();
  std::filesystem::create_directories(dir + "/controller/jobs");
  const uint64_t running = 0x1111, queued = 0x2222, ended = 0x3333;
  daemon::save_job(dir + "/controller/jobs", record(running, "running", "running", {"node-a"}));
  daemon::save_job(dir + "/controller/jobs", record(queued, "queued", "queued", {}));
  daemon::save_job(dir + "/controller/jobs", record(ended, "ended", "failed", {"node-a"}));
  ControllerUnderTest t(dir);
  CHECK(state(t, running) == "running");  // not failed blindly: its nodes may still train it
  CHECK(state(t, queued) == "queued");
  daemon::NodeRegistration back = node_named("node-a", 1, /*boot=*/1);
  back.running_jobs = {running, ended};  // kept training while the controller was away
  FakeNode node(t, back);
  daemon::JobMessageIn m = node.next();
  CHECK(m.kind == daemon::JobKind::Cancel);  // the job the controller lists as ended
  CHECK(m.job_id == ended);
  CHECK(node.quiet_for(300ms));  // the adopted one goes on
  const std::string log = t.ask(daemon::RequestKind::Logs, running).at("log").dump();
  CHECK(log.find("node-a still trains it: adopted") != std::string::npos);
  CHECK(state(t, running) == "running");
  end_job(node, running);  // its end is what the node reports, as before the restart
  CHECK(testing::wait_for([&] { return state(t, running) == "failed"; }, 5000ms,
                          "the running job to fail"));
  CHECK(t.job(running).at("error").get<std::string>().find("ended by the test") !=
        std::string::npos);
  m = node.next();
  CHECK(m.kind == daemon::JobKind::Start);  // then the queued job
  CHECK(m.job_id == queued);
}

TEST_CASE("adoption: a restarted node is offered the rejoin; one that never returns is dropped",
          "[controller]") {
  const std::string dir = temp_dir();
  std::filesystem::create_directories(dir + "/controller/jobs");
  const uint64_t id = 0x4444;
  daemon::save_job(dir + "/controller/jobs", record(id, "two", "running", {"node-a", "node-b"}));
  ControllerUnderTest t(dir, /*peer_timeout_ms=*/600);  // adoption waits 2x that + 5 s
  SECTION("node-b restarted while the controller was away (a new boot)") {
    daemon::NodeRegistration a = node_named("node-a", 1, 1);
    a.running_jobs = {id};
    FakeNode node_a(t, a);
    FakeNode node_b(t, node_named("node-b", 2, /*boot=*/2));
    const daemon::JobMessageIn start = node_b.next();
    CHECK(start.kind == daemon::JobKind::Start);
    CHECK(start.start.rejoin);
    node_b.send(id, daemon::AttachedReport{}, start.start.part);
    CHECK(node_a.next().kind == daemon::JobKind::Rejoin);
    CHECK(t.job(id).at("lost_nodes") == daemon::Json({"node-b"}));
    CHECK(state(t, id) == "running");
  }
  SECTION("no node comes back: the job fails at the deadline, it is not left running") {
    CHECK(state(t, id) == "running");
    CHECK(testing::wait_for([&] { return state(t, id) == "failed"; }, 10s, "the job to fail"));
    CHECK(t.job(id).at("error").get<std::string>().find("every node of the job was lost") !=
          std::string::npos);
  }
}

TEST_CASE("a silent node is lost at the peer timeout; one that heartbeats is not",
          "[controller]") {
  ControllerUnderTest t("", /*peer_timeout_ms=*/600);
  FakeNode silent(t, node_named("node-a", 1));
  FakeNode talking(t, node_named("node-b", 2));
  const uint64_t id = submit(t, "on-both", 2);
  CHECK(silent.next().kind == daemon::JobKind::Start);
  CHECK(talking.next().kind == daemon::JobKind::Start);
  const auto start = std::chrono::steady_clock::now();
  bool lost = false;
  while (!lost && std::chrono::steady_clock::now() - start < 3s) {
    talking.heartbeat();
    std::this_thread::sleep_for(100ms);
    lost = !alive(t, "node-a");
  }
  CHECK(lost);
  CHECK(std::chrono::steady_clock::now() - start >= 500ms);  // not before the timeout
  CHECK(alive(t, "node-b"));
  CHECK(t.job(id).at("lost_nodes") == daemon::Json({"node-a"}));
  CHECK(state(t, id) == "running");  // it goes on with node-b
}

TEST_CASE("a node registering again while its old session lives replaces that session",
          "[controller]") {
  ControllerUnderTest t;
  FakeNode a(t, node_named("node-a", 1, /*boot=*/1));
  FakeNode b(t, node_named("node-b", 2));
  const uint64_t id = submit(t, "on-both", 2);
  CHECK(a.next().kind == daemon::JobKind::Start);
  CHECK(b.next().kind == daemon::JobKind::Start);
  SECTION("the same process reconnecting: one member, the old connection closed") {
    FakeNode again(t, node_named("node-a", 1, /*boot=*/1));
    CHECK(testing::wait_for(
        [&] {
          try {
            a.connection->receive(100ms);
            return false;
          } catch (const transport::ControlError& e) {
            return e.kind() == transport::ControlError::Kind::kClosed;
          }
        },
        5000ms, "node-a's old connection to be closed"));
    CHECK(t.ask(daemon::RequestKind::Nodes).at("nodes").size() == 2);
    CHECK(alive(t, "node-a"));
    CHECK(t.job(id).at("lost_nodes").empty());
  }
  SECTION("a restarted process: lost from the job, then sent it again to rejoin") {
    FakeNode restarted(t, node_named("node-a", 1, /*boot=*/2));
    const daemon::JobMessageIn start = restarted.next();
    CHECK(start.kind == daemon::JobKind::Start);
    CHECK(start.job_id == id);
    CHECK(start.start.rejoin);
    CHECK(start.start.rank == 0);
    // node-b hears of it only once its new part takes the job's datagrams: told earlier, it
    // could send the parameters to a node that drops them.
    CHECK(b.quiet_for(300ms));
    restarted.send(id, daemon::AttachedReport{}, start.start.part);
    const daemon::JobMessageIn told = b.next();
    CHECK(told.kind == daemon::JobKind::Rejoin);
    CHECK(told.rejoin.id == 1);
    CHECK(told.rejoin.boot == 2);
    CHECK(t.job(id).at("lost_nodes") == daemon::Json({"node-a"}));
  }
}

TEST_CASE("a node back after the job dropped it is taken back in either mode; its old reports "
          "do not count", "[controller]") {
  const std::string mode = GENERATE(as<std::string>(), "gradient_sharing", "parameter_averaging");
  // 1500 ms, not 600: node-a (back) heartbeats only between the steps below, and a loaded
  // 2-core CI machine once stretched them past 600 ms and lost it.
  ControllerUnderTest t("", /*peer_timeout_ms=*/1500);
  FakeNode a(t, node_named("node-a", 1, /*boot=*/1));
  FakeNode b(t, node_named("node-b", 2));
  const uint64_t id = submit(t, "paused", 2, mode);
  const daemon::JobMessageIn first = a.next();
  CHECK(first.kind == daemon::JobKind::Start);
  const uint64_t old_part = first.start.part;  // its old part's reports carry it
  CHECK(old_part != 0);
  CHECK(b.next().kind == daemon::JobKind::Start);
  // node-a is paused: silent past the peer timeout while node-b heartbeats.
  CHECK(testing::wait_for(
      [&] {
        b.heartbeat();
        return !alive(t, "node-a");
      },
      5000ms, "node-a to be lost"));
  CHECK(t.job(id).at("lost_nodes") == daemon::Json({"node-a"}));
  // The same process is back (same boot) and still runs its old part.
  daemon::NodeRegistration same = node_named("node-a", 1, /*boot=*/1);
  same.running_jobs = {id};
  FakeNode back(t, same);
  const daemon::JobMessageIn told = back.next();
  CHECK(told.job_id == id);
  // Taken back like a restarted node, in either mode: sent the job to rejoin, node-b told to
  // admit it.
  CHECK(told.kind == daemon::JobKind::Start);
  CHECK(told.start.rejoin);
  CHECK(told.start.part != old_part);
  // The old part's Attached (it never sends one, but a stale report) does not announce it.
  back.send(id, daemon::AttachedReport{}, old_part);
  CHECK(b.quiet_for(300ms));
  back.send(id, daemon::AttachedReport{}, told.start.part);
  CHECK(b.next().kind == daemon::JobKind::Rejoin);
  // What its old part did while it was away (queued, sent once it was back) does not count,
  // nor does its failure: the new part is not withdrawn for it.
  daemon::ProgressReport progress;
  progress.epoch = 9;
  back.send(id, progress, old_part);
  back.send(id, daemon::ResultReport{}, old_part);
  back.send(id, daemon::FailedReport{0, "its old part failed", "", false}, old_part);
  for (int i = 0; i < 5; ++i) {  // no cancel, no withdrawal for node-b: the job goes on
    back.heartbeat();
    b.heartbeat();
    CHECK(b.quiet_for(100ms));
  }
  daemon::Json job = t.job(id);
  CHECK(job.at("state") == "running");
  CHECK_FALSE(job.at("progress").contains("node-a"));
  const std::string log = t.ask(daemon::RequestKind::Logs, id).at("log").dump();
  CHECK(log.find("node-a is back after the job dropped it") != std::string::npos);
  CHECK(log.find("its old part failed") == std::string::npos);
  // The new part's failure (before it was admitted) withdraws it: node-b stops expecting it.
  back.send(id, daemon::FailedReport{0, "no snapshot", "", false}, told.start.part);
  const daemon::JobMessageIn gone = b.next();
  CHECK(gone.kind == daemon::JobKind::Rejoin);
  CHECK(gone.rejoin.withdrawn);
  // node-b alone decides the job's end.
  end_job(b, id);
  CHECK(testing::wait_for([&] { return state(t, id) == "failed"; }, 5000ms, "the job to fail"));
  CHECK(t.job(id).at("error").get<std::string>().find("ended by the test") != std::string::npos);
}

TEST_CASE("adoption: a node that was lost and rejoined before the restart is adopted too",
          "[controller]") {
  const std::string dir = temp_dir();
  std::filesystem::create_directories(dir + "/controller/jobs");
  const uint64_t id = 0x6666;
  daemon::JobRecord r = record(id, "two", "running", {"node-a", "node-b"});
  r.lost_nodes = {"node-b"};
  r.rejoined_nodes = {"node-b"};  // it is back in the job: a live member like node-a
  r.checkpoints = {{"node-a", 2}, {"node-b", 2}};
  daemon::save_job(dir + "/controller/jobs", r);
  ControllerUnderTest t(dir, /*peer_timeout_ms=*/600);
  daemon::NodeRegistration ra = node_named("node-a", 1, 1), rb = node_named("node-b", 2, 1);
  ra.running_jobs = rb.running_jobs = {id};
  FakeNode a(t, ra);
  FakeNode b(t, rb);
  CHECK(b.quiet_for(300ms));  // adopted: nothing to do
  const std::string log = t.ask(daemon::RequestKind::Logs, id).at("log").dump();
  CHECK(log.find("node node-b still trains it: adopted") != std::string::npos);
  CHECK(log.find("adopted by the restarted controller: 2 of 2") != std::string::npos);
  CHECK(t.job(id).at("checkpoint").at("epoch") == 2);
}

TEST_CASE("every node restarted: the job resumes from its consistent checkpoint, or fails "
          "without one", "[controller]") {
  const std::string dir = temp_dir();
  std::filesystem::create_directories(dir + "/controller/jobs");
  const uint64_t id = 0x5555;
  daemon::JobRecord r = record(id, "two", "running", {"node-a", "node-b"});
  const bool checkpointed = GENERATE(true, false);
  if (checkpointed) r.checkpoints = {{"node-a", 4}, {"node-b", 3}};
  daemon::save_job(dir + "/controller/jobs", r);
  ControllerUnderTest t(dir, /*peer_timeout_ms=*/600);
  FakeNode a(t, node_named("node-a", 1, /*boot=*/7));  // new boots, no running jobs
  FakeNode b(t, node_named("node-b", 2, /*boot=*/8));
  if (checkpointed) {
    for (FakeNode* n : {&a, &b}) {
      const daemon::JobMessageIn start = n->next();
      CHECK(start.kind == daemon::JobKind::Start);
      CHECK(start.job_id == id);
      CHECK(start.start.resume_epoch == 3);  // the epoch both have
      CHECK_FALSE(start.start.rejoin);
      CHECK(start.start.members.at(start.start.rank).boot == (n == &a ? 7u : 8u));
    }
    CHECK(state(t, id) == "running");
    CHECK(t.job(id).at("lost_nodes").empty());
    const std::string log = t.ask(daemon::RequestKind::Logs, id).at("log").dump();
    CHECK(log.find("resumes from its checkpoint at the end of epoch 3") != std::string::npos);
  } else {
    CHECK(testing::wait_for([&] { return state(t, id) == "failed"; }, 5000ms, "the job to fail"));
    CHECK(t.job(id).at("error").get<std::string>().find("every node of the job was lost") !=
          std::string::npos);
  }
}

TEST_CASE("the job's consistent checkpoint is the latest epoch every live node has one for",
          "[controller]") {
  ControllerUnderTest t("", /*peer_timeout_ms=*/600);
  FakeNode a(t, node_named("node-a", 1));
  FakeNode b(t, node_named("node-b", 2));
  const uint64_t id = submit(t, "ckpt", 2);
  CHECK(a.next().kind == daemon::JobKind::Start);
  CHECK(b.next().kind == daemon::JobKind::Start);
  auto consistent = [&] {
    return t.job(id).value("checkpoint", daemon::Json::object()).value("epoch", -1);
  };
  a.send(id, daemon::CheckpointReport{1, "m.ckpt-10.dtm"});
  a.send(id, daemon::CheckpointReport{2, "m.ckpt-20.dtm"});
  b.heartbeat();  // alive through node-a's wait (600 ms timeout)
  CHECK(a.quiet_for(200ms));
  CHECK(consistent() == -1);  // node-b has none yet
  b.send(id, daemon::CheckpointReport{1, "m.ckpt-11.dtm"});
  CHECK(testing::wait_for([&] { return consistent() == 1; }, 5000ms,
                          "the consistent checkpoint to be epoch 1"));
  b.send(id, daemon::CheckpointReport{2, "m.ckpt-21.dtm"});
  CHECK(testing::wait_for([&] { return consistent() == 2; }, 5000ms,
                          "the consistent checkpoint to be epoch 2"));
  // An epoch no spec can ask for: the reader refuses the report, and nothing moves.
  b.send(id, daemon::CheckpointReport{-1, "m.ckpt-bad.dtm"});
  CHECK(a.quiet_for(200ms));
  CHECK(consistent() == 2);
  a.send(id, daemon::CheckpointReport{3, "m.ckpt-30.dtm"});
  // node-b is lost: the live node's newest is the job's.
  CHECK(testing::wait_for(
      [&] {
        a.heartbeat();
        return consistent() == 3;
      },
      5000ms, "the consistent checkpoint to be epoch 3"));
  const std::string log = t.ask(daemon::RequestKind::Logs, id).at("log").dump();
  CHECK(log.find("every live node has its replica at the end of epoch 2") != std::string::npos);
}

TEST_CASE("a node cannot report for a job it is not a member of", "[controller]") {
  ControllerUnderTest t;
  FakeNode member(t, node_named("node-a", 1));
  FakeNode outsider(t, node_named("node-b", 2));
  const uint64_t id = submit(t, "on-one", 1);  // on node-a, the lower node id
  CHECK(member.next().job_id == id);
  CHECK(t.job(id).at("nodes") == daemon::Json({"node-a"}));
  outsider.send(id, daemon::FailedReport{0, "forged failure", "", false});
  outsider.send(id, daemon::ResultReport{});
  outsider.send(id, daemon::ProgressReport{});
  outsider.send(id, daemon::LogReport{"forged line"});
  CHECK(member.quiet_for(500ms));  // no cancel: the forged failure did not end the job
  const daemon::Json job = t.job(id);
  CHECK(job.at("state") == "running");
  CHECK_FALSE(job.at("progress").contains("node-b"));
  const std::string log = t.ask(daemon::RequestKind::Logs, id).at("log").dump();
  CHECK(log.find("forged") == std::string::npos);
  // The member's own report still counts.
  end_job(member, id);
  CHECK(testing::wait_for([&] { return state(t, id) == "failed"; }, 5000ms, "the job to fail"));
  CHECK(t.job(id).at("error").get<std::string>().find("ended by the test") != std::string::npos);
}

TEST_CASE("a request of the wrong shape is refused and the controller goes on", "[controller]") {
  // A malformed message fails that message, never the daemon (docs/architecture/daemon.md,
  // "Invariants").
  ControllerUnderTest t;
  auto submit_request = [](const std::string& spec, const std::string& base_dir) {
    daemon::ClientRequest q = daemon::client_request(daemon::RequestKind::Submit);
    q.spec = spec;
    q.base_dir = base_dir;
    return q;
  };
  const std::pair<daemon::ClientRequest, std::string> requests[] = {
      // Longer than any real request's: refused before anything reads it.
      {submit_request(std::string((1 << 20) + 1, 'x'), "."), "longer than any real request's"},
      {submit_request("name: x", std::string(5000, 'd')), "longer than any real request's"},
      {submit_request(": : not yaml [", "."), "job.yaml"},  // the parser names the file
      {submit_request("", "."), "job.yaml"}};
  for (const auto& [request, error] : requests) {
    try {
      t.ask(request);
      FAIL("a submit request was accepted; it should be refused with '" << error << "'");
    } catch (const daemon::RequestRefused& e) {
      CHECK_THAT(e.error(), Catch::Contains(error));
    }
  }
  try {
    t.ask(daemon::RequestKind::Cancel, 0x1234);
    FAIL("cancel of an unknown job was accepted");
  } catch (const daemon::RequestRefused& e) {
    CHECK_THAT(e.error(), Catch::Contains("no job"));
  }
  CHECK(t.ask(daemon::RequestKind::Status).at("jobs").empty());  // nothing was kept, and it still answers
}

TEST_CASE("job states are an enum with a word each; a record's unknown word reads as failed",
          "[controller]") {
  using daemon::JobState;
  for (JobState st : {JobState::kQueued, JobState::kRunning, JobState::kSucceeded,
                      JobState::kFailed, JobState::kCancelled})
    CHECK(daemon::parse_job_state(daemon::job_state_name(st)) == st);
  CHECK_FALSE(daemon::parse_job_state("paused").has_value());
  CHECK_FALSE(daemon::parse_job_state("").has_value());
  CHECK(daemon::job_ended(JobState::kCancelled));
  CHECK_FALSE(daemon::job_ended(JobState::kRunning));
  daemon::Json j = record(0x42, "later", "running", {"node-a"}).to_json();
  CHECK(j.at("state") == "running");
  j["state"] = "migrating";  // a later release's state: not running here
  CHECK(daemon::JobRecord::from_json(j).state == JobState::kFailed);
}

TEST_CASE("a client credential cannot report for a job", "[controller]") {
  // Reports are a node's: a client that sends one (a forged failure or result of a running
  // job) is answered with a refusal, and the job goes on.
  ControllerUnderTest t;
  FakeNode member(t, node_named("node-a", 1));
  const uint64_t id = submit(t, "reported", 1);
  CHECK(member.next().job_id == id);
  const daemon::NodeReport reports[] = {daemon::FailedReport{0, "forged failure", "", false},
                                        daemon::ResultReport{}};
  for (const daemon::NodeReport& report : reports) {
    auto c = t.as_alice();
    c->send(daemon::report_frame(id, report));
    const std::vector<uint8_t> reply = c->receive(5s);
    const auto* r = daemon::read_control_frame(reply).body_as_Reply();
    REQUIRE(r != nullptr);
    CHECK_FALSE(r->ok());
    CHECK(r->error()->str() == "unexpected first control frame");
  }
  CHECK(member.quiet_for(500ms));  // no cancel: the forged failure did not end the job
  CHECK(t.job(id).at("state") == "running");
  CHECK(t.ask(daemon::RequestKind::Logs, id).at("log").dump().find("forged") == std::string::npos);
  end_job(member, id);
}

TEST_CASE("registrations with GPUs and with or without running jobs are taken", "[controller]") {
  // Their 64-bit running_jobs vector is checked for alignment (a forged frame's can be off):
  // what our own builder makes, empty or not, must pass.
  ControllerUnderTest t;
  for (const bool running : {false, true}) {
    daemon::NodeRegistration node = node_named(running ? "node-b" : "node-a", running ? 2 : 1);
    node.gpus.push_back({0, "NVIDIA H100", 80ull << 30});
    if (running) node.running_jobs = {0x1234};
    FakeNode registered(t, node);  // REQUIREs that the controller took it
    CHECK(alive(t, node.name));
  }
}

TEST_CASE("a node whose data.lanes or data.mtu differs from the live nodes' is refused, naming "
          "the fix",
          "[controller]") {
  ControllerUnderTest t;
  daemon::NodeRegistration two = node_named("node-a", 1);
  two.data_lanes = 2;
  FakeNode a(t, two);
  CHECK(t.ask(daemon::RequestKind::Nodes).at("nodes").at(0).at("data_lanes") == 2);
  CHECK(t.ask(daemon::RequestKind::Nodes).at("nodes").at(0).at("data_mtu") == 1500);
  auto c = t.as_daemon();
  const std::string refusal = register_reply(*c, node_named("node-b", 2));  // 1 lane
  CHECK(refusal.find("node node-b has data.lanes 1, and node node-a (alive) has 2") !=
        std::string::npos);
  CHECK(t.ask(daemon::RequestKind::Nodes).at("nodes").size() == 1);
  // Another data.mtu is refused as well, naming the live nodes' (a relay's chunks must be of
  // one size).
  daemon::NodeRegistration jumbo = node_named("node-j", 5);
  jumbo.data_lanes = 2;
  jumbo.data_mtu = 9000;
  auto cj = t.as_daemon();
  std::string fix;
  const std::string mtu_refusal = register_reply(*cj, jumbo, &fix);
  CHECK(mtu_refusal.find("node node-j has data.mtu 9000, and node node-a (alive) has 1500") !=
        std::string::npos);
  CHECK(fix.find("set data.mtu: 1500 in node-j's dtraind.yaml") != std::string::npos);
  // A count out of range is refused too; the same count is taken.
  daemon::NodeRegistration many = node_named("node-c", 3);
  many.data_lanes = 200;
  auto c2 = t.as_daemon();
  CHECK(register_reply(*c2, many).find("200 data lanes, outside 1 .. 16") != std::string::npos);
  daemon::NodeRegistration same = node_named("node-d", 4);
  same.data_lanes = 2;
  FakeNode d(t, same);
  CHECK(alive(t, "node-d"));
}

TEST_CASE("a node whose data channel speaks another wire version is refused, naming both",
          "[controller]") {
  ControllerUnderTest t;
  daemon::NodeRegistration old = node_named("node-old", 1);
  old.data_wire = 0;  // a release before the field: its datagrams are of version 4 or older
  auto c = t.as_daemon();
  std::string fix;
  const std::string refusal = register_reply(*c, old, &fix);
  CHECK(refusal.find("node node-old's data channel speaks wire version 4 or older, and this "
                     "controller's speaks " + std::to_string(transport::kWireVersion)) !=
        std::string::npos);
  CHECK(fix.find("run the same dtrain release on every node (upgrade node-old") !=
        std::string::npos);
  daemon::NodeRegistration newer = node_named("node-new", 2);
  newer.data_wire = transport::kWireVersion + 1;
  auto c2 = t.as_daemon();
  CHECK(register_reply(*c2, newer).find("speaks wire version " +
                                        std::to_string(transport::kWireVersion + 1)) !=
        std::string::npos);
  CHECK(t.ask(daemon::RequestKind::Nodes).at("nodes").empty());
  // The registration carries the version across the wire: a node of this release is taken.
  FakeNode same(t, node_named("node-same", 3));
  CHECK(alive(t, "node-same"));
}

TEST_CASE("the whole cluster went down and one node stays away: the job resumes on those back",
          "[controller]") {
  const std::string dir = temp_dir();
  std::filesystem::create_directories(dir + "/controller/jobs");
  const uint64_t id = 0x7777;
  daemon::JobRecord r = record(id, "three", "running", {"node-a", "node-b", "node-c"});
  r.checkpoints = {{"node-a", 3}, {"node-b", 4}, {"node-c", 3}};
  daemon::save_job(dir + "/controller/jobs", r);
  ControllerUnderTest t(dir, /*peer_timeout_ms=*/600);  // adoption waits 2x that + 5 s
  FakeNode a(t, node_named("node-a", 1, /*boot=*/7));     // new boots: their parts are gone
  FakeNode b(t, node_named("node-b", 2, /*boot=*/8));
  // At the deadline, not before node-c had its chance; both heartbeat meanwhile.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (a.quiet_for(100ms) && std::chrono::steady_clock::now() < deadline) {
    a.heartbeat();
    b.heartbeat();
  }
  for (FakeNode* n : {&a, &b}) {
    const daemon::JobMessageIn start = n->next();
    CHECK(start.kind == daemon::JobKind::Start);
    CHECK(start.start.resume_epoch == 3);
    CHECK(start.start.members.size() == 2);  // the shards spread over the two
    CHECK(start.start.members.at(start.start.rank).name == (n == &a ? "node-a" : "node-b"));
  }
  const daemon::Json job = t.job(id);
  CHECK(job.at("state") == "running");
  CHECK(job.at("nodes") == daemon::Json({"node-a", "node-b"}));
  const std::string log = t.ask(daemon::RequestKind::Logs, id).at("log").dump();
  CHECK(log.find("resumes from its checkpoint at the end of epoch 3 on 2 nodes (without "
                 "node-c") != std::string::npos);
  // node-c comes back still training its old part: it is no member now, and is told to stop.
  daemon::NodeRegistration c = node_named("node-c", 3, 1);
  c.running_jobs = {id};
  FakeNode late(t, c);
  const daemon::JobMessageIn stop = late.next();
  CHECK(stop.kind == daemon::JobKind::Cancel);
  CHECK(stop.job_id == id);
}

TEST_CASE("`resume JOB`: a failed job goes on from its checkpoint on the nodes that hold it",
          "[controller]") {
  ControllerUnderTest t("", /*peer_timeout_ms=*/2000);
  auto a = std::make_unique<FakeNode>(t, node_named("node-a", 1));
  FakeNode b(t, node_named("node-b", 2));
  const uint64_t id = submit(t, "resumable", 2);
  CHECK(a->next().kind == daemon::JobKind::Start);
  CHECK(b.next().kind == daemon::JobKind::Start);
  auto refusal = [&](uint64_t job) {
    try {
      t.ask(daemon::RequestKind::Resume, job);
    } catch (const daemon::RequestRefused& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  CHECK(refusal(id).find("only a failed or cancelled job can be resumed") != std::string::npos);
  a->send(id, daemon::CheckpointReport{2, "m.ckpt-20.dtm"});
  b.send(id, daemon::CheckpointReport{2, "m.ckpt-21.dtm"});
  CHECK(testing::wait_for([&] { return t.job(id).value("checkpoint", daemon::Json()).is_object(); },
                          5000ms, "the job to list a checkpoint"));
  end_job(*a, id);  // node-a fails: the job fails, node-b is told to stop
  CHECK(b.next().kind == daemon::JobKind::Cancel);
  b.send(id, daemon::FailedReport{1, "cancelled", "", true});
  CHECK(testing::wait_for([&] { return state(t, id) == "failed"; }, 5000ms, "the job to fail"));
  CHECK(t.job(id).at("fix").get<std::string>().find("dtrain-submit resume " +
                                                    daemon::job_id_text(id)) != std::string::npos);
  a.reset();  // node-a is gone; node-b holds the checkpoint too
  CHECK(testing::wait_for([&] { return !alive(t, "node-a"); }, 5000ms, "node-a to be lost"));
  const daemon::Json queued = t.ask(daemon::RequestKind::Resume, id);
  CHECK((queued.at("state") == "queued" || queued.at("state") == "running"));
  const daemon::JobMessageIn start = b.next();
  CHECK(start.kind == daemon::JobKind::Start);
  CHECK(start.start.resume_epoch == 2);
  CHECK(start.start.members.size() == 1);
  CHECK(start.start.rank == 0);
  CHECK(state(t, id) == "running");
  CHECK(t.job(id).at("error") == "");
  CHECK(t.job(id).at("nodes") == daemon::Json({"node-b"}));
  // A job without a checkpoint cannot be resumed; the refusal names the fix.
  const uint64_t other = submit(t, "no-checkpoint", 1);
  t.ask(daemon::RequestKind::Cancel, other);  // queued behind the resumed one: cancelled at once
  CHECK(refusal(other).find("has no consistent checkpoint") != std::string::npos);
  CHECK(refusal(other).find("output.checkpoint_every") != std::string::npos);
}

TEST_CASE("elastic membership: starts at min, a later node joins a vacant slot, below min it "
          "stops", "[controller]") {
  ControllerUnderTest t("", /*peer_timeout_ms=*/2000);
  auto a = std::make_unique<FakeNode>(t, node_named("node-a", 1));
  auto b = std::make_unique<FakeNode>(t, node_named("node-b", 2));
  const uint64_t id = submit_elastic(t, 2);
  for (FakeNode* n : {a.get(), b.get()}) {
    const daemon::JobMessageIn start = n->next();
    REQUIRE(start.kind == daemon::JobKind::Start);
    REQUIRE(start.start.members.size() == 3);  // two nodes and one vacant slot
    const daemon::JobMemberInfo& slot = start.start.members[2];
    CHECK(slot.address == "");
    CHECK(daemon::is_slot_id(slot.id));
    CHECK(slot.workers == 2);
  }
  CHECK(t.job(id).at("nodes").size() == 2);
  FakeNode c(t, node_named("node-c", 3, /*boot=*/33));
  const daemon::JobMessageIn join = c.next();
  REQUIRE(join.kind == daemon::JobKind::Start);
  CHECK(join.start.rejoin);
  CHECK(join.start.joining);
  CHECK(join.start.rank == 2);  // the slot's place: its workers and shards
  CHECK(join.start.members[2].name == "node-c");
  CHECK(join.start.members[2].workers == 2);
  c.send(id, daemon::AttachedReport{}, join.start.part);
  for (FakeNode* n : {a.get(), b.get()}) {
    const daemon::JobMessageIn told = n->next();
    REQUIRE(told.kind == daemon::JobKind::Rejoin);
    REQUIRE(told.rejoin.member.has_value());
    CHECK(told.rejoin.id == 3);
    CHECK(told.rejoin.boot == 33);
    CHECK(told.rejoin.member->name == "node-c");
    CHECK(daemon::is_slot_id(told.rejoin.slot));
  }
  // Not admitted yet: its failure would not fail the job; once admitted it is a member.
  c.send(id, daemon::RejoinedReport{3, "node-a"});
  CHECK(testing::wait_for([&] { return t.job(id).at("joined_nodes") == daemon::Json({"node-c"}); },
                          5000ms, "node-c among the joined nodes"));
  CHECK(t.job(id).at("rejoined_nodes").empty());
  a.reset();  // two of three live: at the minimum, the job goes on
  CHECK(testing::wait_for([&] { return !alive(t, "node-a"); }, 5000ms, "node-a to be lost"));
  CHECK(state(t, id) == "running");
  b.reset();  // one live: below the minimum of 2
  CHECK(c.next().kind == daemon::JobKind::Cancel);
  c.send(id, daemon::FailedReport{2, "cancelled", "", true});
  CHECK(testing::wait_for([&] { return state(t, id) == "failed"; }, 5000ms, "the job to fail"));
  CHECK(t.job(id).at("error").get<std::string>().find("fewer than its minimum of 2") !=
        std::string::npos);
}

TEST_CASE("a job with early stopping does not take a node back: it is told to stop its part",
          "[controller]") {
  ControllerUnderTest t("", /*peer_timeout_ms=*/600);
  FakeNode a(t, node_named("node-a", 1, /*boot=*/1));
  FakeNode b(t, node_named("node-b", 2));
  const std::string text = spec("stops-early", 2) +
                           "  early_stopping: {metric: loss, patience: 2}\n";
  const uint64_t id = submit_text(t, text);
  CHECK(a.next().kind == daemon::JobKind::Start);
  CHECK(b.next().kind == daemon::JobKind::Start);
  const std::unique_ptr<FakeNode> back = paused_and_back(t, b, id);
  const daemon::JobMessageIn told = back->next();
  CHECK(told.kind == daemon::JobKind::Cancel);  // its best model so far would be missing
  CHECK(told.job_id == id);
  CHECK(b.quiet_for(300ms));  // node-b is not told to admit anyone
  const std::string log = t.ask(daemon::RequestKind::Logs, id).at("log").dump();
  CHECK(log.find("does not take nodes back") != std::string::npos);
}

TEST_CASE("a node that fails to join is withdrawn: the others stop expecting it, or never "
          "heard of it", "[controller]") {
  ControllerUnderTest t("", /*peer_timeout_ms=*/2000);
  FakeNode a(t, node_named("node-a", 1));
  FakeNode b(t, node_named("node-b", 2));
  const uint64_t id = submit_elastic(t, 1);
  CHECK(a.next().kind == daemon::JobKind::Start);
  CHECK(b.next().kind == daemon::JobKind::Start);
  FakeNode c(t, node_named("node-c", 3));
  const daemon::JobMessageIn join = c.next();
  CHECK(join.kind == daemon::JobKind::Start);
  // Its data files are missing on that machine, say: it fails before it is admitted.
  const daemon::FailedReport failure{2, "cannot read none.csv", "", false};
  SECTION("after its part was on the job's mesh: the others were told, then withdrawn") {
    c.send(id, daemon::AttachedReport{}, join.start.part);
    CHECK(a.next().kind == daemon::JobKind::Rejoin);
    CHECK(b.next().kind == daemon::JobKind::Rejoin);
    c.send(id, failure);
    for (FakeNode* n : {&a, &b}) {
      const daemon::JobMessageIn gone = n->next();
      REQUIRE(gone.kind == daemon::JobKind::Rejoin);
      CHECK(gone.rejoin.withdrawn);
      CHECK(gone.rejoin.id == 3);
    }
  }
  SECTION("before: neither a rejoin to expect nor one to withdraw") {
    c.send(id, failure);
    CHECK(testing::wait_for([&] { return t.job(id).at("lost_nodes") == daemon::Json({"node-c"}); },
                            5000ms, "node-c among the lost nodes"));
    CHECK(a.quiet_for(300ms));
    CHECK(b.quiet_for(300ms));
  }
  const daemon::Json job = t.job(id);
  CHECK(job.at("state") == "running");  // one failed join does not fail the job
  CHECK(job.at("lost_nodes") == daemon::Json({"node-c"}));
  const std::string log = t.ask(daemon::RequestKind::Logs, id).at("log").dump();
  CHECK(log.find("it failed to join: cannot read none.csv") != std::string::npos);
}

TEST_CASE("node-local data: the plan is sent once every node listed its files, and again to a "
          "node that rejoins; a plan that cannot be made stops the job", "[controller]") {
  ControllerUnderTest t("", /*peer_timeout_ms=*/600);
  FakeNode a(t, node_named("node-a", 1, /*boot=*/1));
  FakeNode b(t, node_named("node-b", 2));
  const std::string text = "name: local\nmodel:\n  input: [4]\n  layers:\n"
                           "    - output: {units: 3, activation: softmax, loss: mcxent}\n"
                           "data:\n  train: {format: packed, shards: \"/d/{node}/*.dtb\"}\n"
                           "training:\n  nodes: 2\n";
  const uint64_t id = submit_text(t, text);
  REQUIRE(a.next().kind == daemon::JobKind::Start);
  REQUIRE(b.next().kind == daemon::JobKind::Start);
  auto list = [](const std::string& node, std::vector<int> ks) {
    std::vector<daemon::ShardFile> files;
    for (int k : ks)
      files.push_back({"/d/" + node + "/f" + std::to_string(k) + ".dtb", 50, 300, 9});
    return daemon::ShardsReport{files};
  };
  SECTION("every node listed: each is sent its files; one back is sent its part again") {
    a.send(id, list("node-a", {0, 1, 2}));
    b.heartbeat();  // alive through node-a's wait (600 ms timeout)
    CHECK(a.quiet_for(200ms));  // node-b's list is still to come
    b.send(id, list("node-b", {2, 3, 4, 5}));
    const daemon::JobMessageIn pa = a.next(), pb = b.next();
    REQUIRE(pa.kind == daemon::JobKind::DataPlan);
    REQUIRE(pb.kind == daemon::JobKind::DataPlan);
    // f0, f1 only on node-a, f3-f5 only on node-b: the shared f2 evens them out.
    CHECK(pa.plan.member_examples == std::vector<int64_t>{150, 150});
    CHECK(pa.plan.files.size() + pb.plan.files.size() == 6);  // f2 is read once
    CHECK(pb.plan.member_examples == pa.plan.member_examples);
    const std::string log = t.ask(daemon::RequestKind::Logs, id).at("log").dump();
    CHECK(log.find("node-local data: 6 files, 300 of the export's 300 examples") !=
          std::string::npos);
    // node-a is paused past the peer timeout, then back: it rejoins and lists its files again.
    const std::unique_ptr<FakeNode> back = paused_and_back(t, b, id);
    const daemon::JobMessageIn again = back->next();
    REQUIRE(again.kind == daemon::JobKind::Start);
    back->send(id, list("node-a", {0, 1, 2}), again.start.part);
    const daemon::JobMessageIn kept = back->next();
    REQUIRE(kept.kind == daemon::JobKind::DataPlan);
    CHECK(kept.plan.files == pa.plan.files);
    CHECK(kept.plan.member_examples == pa.plan.member_examples);
  }
  SECTION("a node that registers again (a new session) is sent the kept plan again") {
    a.send(id, list("node-a", {0, 1, 2}));
    b.send(id, list("node-b", {3}));
    const daemon::JobMessageIn first = a.next();
    REQUIRE(first.kind == daemon::JobKind::DataPlan);
    daemon::NodeRegistration same = node_named("node-a", 1, /*boot=*/1);
    same.running_jobs = {id};
    FakeNode again(t, same);  // its old session's queue is gone with it
    const daemon::JobMessageIn resent = again.next();
    REQUIRE(resent.kind == daemon::JobKind::DataPlan);
    CHECK(resent.plan.files == first.plan.files);
  }
  SECTION("a node with none of the files: the job stops, naming it") {
    a.send(id, list("node-a", {0, 1}));
    b.send(id, list("node-b", {}));
    CHECK(a.next().kind == daemon::JobKind::Cancel);
    CHECK(b.next().kind == daemon::JobKind::Cancel);
    for (FakeNode* n : {&a, &b})
      n->send(id, daemon::FailedReport{0, "cancelled", "", true});
    CHECK(testing::wait_for([&] { return state(t, id) == "failed"; }, 5000ms, "the job to fail"));
    CHECK(t.job(id).at("error") == "controller: data.train.shards: node-b holds none of the files "
                                   "data.train.shards matches: its workers would have no data");
  }
}
