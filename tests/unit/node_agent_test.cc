// The node agent in-process (daemon/node/node_agent.h), with fakes on both sides: a fake
// controller on a real loopback control channel, and fake job parts (JobPartFactory) that train
// nothing. It shows what the agent does with the controller's frames: a Start it cannot carry
// out becomes a Failed report, a repeated Start is ignored, a malformed frame is dropped and the
// session goes on, and reports queued while the controller is away go out in the next session.
// Every wait has a deadline and says what it waited for.
#include <catch2/catch.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "daemon/node/node_agent.h"
#include "daemon/protocol/client_requests.h"
#include "daemon/protocol/control_messages.h"
#include "daemon/protocol/node_reports.h"
#include "tests/test_util.h"
#include "tests/wait_for.h"
#include "daemon/protocol/control_frames.h"
#include "transport/control/control_server.h"

namespace dtrain::daemon {
namespace {

using namespace std::chrono_literals;
using testing::wait_for;

transport::ClusterKey cluster_key() {
  transport::ClusterKey k;
  k.fill(7);
  return k;
}

// The controller's side: takes the node's registration, sends what the test queues, keeps what
// the node reports, and ends the session when the test asks.
class FakeController {
 public:
  FakeController()
      : server_("127.0.0.1", 0, cluster_key(),
                [this](transport::ControlConnection& c) { serve(c); }, 2s) {}
  ~FakeController() { server_.stop(); }
  uint16_t port() const { return server_.port(); }

  void send(std::vector<uint8_t> frame) {
    std::lock_guard<std::mutex> lock(mutex_);
    outgoing_.push_back(std::move(frame));
  }
  void end_session() { end_ = true; }
  int registrations() {
    std::lock_guard<std::mutex> lock(mutex_);
    return int(registered_.size());
  }
  NodeRegistration registration(size_t i) {
    std::lock_guard<std::mutex> lock(mutex_);
    return registered_.at(i);
  }
  // The reports of `kind` about `job` received so far.
  std::vector<JobMessageIn> reports(JobKind kind, uint64_t job) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<JobMessageIn> out;
    for (const JobMessageIn& m : received_)
      if (m.kind == kind && m.job_id == job) out.push_back(m);
    return out;
  }

 private:
  void serve(transport::ControlConnection& c) {
    const std::vector<uint8_t> first = c.receive(5s);
    const auto* r = daemon::read_control_frame(first).body_as_Register();
    NodeRegistration node;
    if (!r || !read_registration(*r, node)) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      registered_.push_back(node);
    }
    end_ = false;
    c.send(reply_ok({{"node_id", node.node_id}, {"name", node.name}}));
    while (!end_) {
      std::deque<std::vector<uint8_t>> out;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        out.swap(outgoing_);
      }
      for (const auto& frame : out) c.send(frame);
      if (!c.wait_readable(20ms)) continue;
      JobMessageIn in;
      if (!read_job_message(c.receive(5s), in) || in.kind == JobKind::Heartbeat) continue;
      std::lock_guard<std::mutex> lock(mutex_);
      received_.push_back(std::move(in));
    }
  }

  transport::ControlServer server_;
  std::mutex mutex_;
  std::deque<std::vector<uint8_t>> outgoing_;
  std::vector<NodeRegistration> registered_;
  std::vector<JobMessageIn> received_;
  std::atomic<bool> end_{false};
};

// A part that trains nothing: it remembers what it was told and reports when the test asks.
struct FakePart : JobPart {
  PartReport report;
  uint64_t part = 0;
  std::atomic<bool> cancelled{false};
  void cancel() override { cancelled = true; }
  void drop() override { cancelled = true; }
  void rejoin(const RejoinMessage&) override {}
  void plan(const DataPlanMessage&) override {}
  bool done() const override { return false; }
  Json snapshot() const override { return Json::object(); }
};

// Starts fakes, except for a job named "cannot", whose part cannot start.
struct Parts {
  std::mutex mutex;
  std::vector<FakePart*> started;
  JobPartFactory factory() {
    return [this](uint64_t, const StartMessage& start, PartReport report,
                  std::unique_ptr<JobPart>) -> std::unique_ptr<JobPart> {
      if (start.name == "cannot") throw std::runtime_error("no GPU left for its workers");
      auto part = std::make_unique<FakePart>();
      part->report = std::move(report);
      part->part = start.part;
      std::lock_guard<std::mutex> lock(mutex);
      started.push_back(part.get());
      return part;
    };
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mutex);
    return started.size();
  }
};

// A Start as the controller sends it: this node its only member, rank 0.
StartMessage start_named(const std::string& name, uint64_t part) {
  StartMessage s;
  s.name = name;
  s.spec = "name: " + name + "\n";
  s.part = part;
  JobMemberInfo me;
  me.id = 1;
  me.name = "node-a";
  me.address = "127.0.0.1";
  s.members = {me};
  return s;
}

// The agent, running against `controller` on a thread of its own until the test ends.
struct AgentUnderTest {
  DaemonConfig config;
  std::unique_ptr<NodeAgent> agent;
  std::atomic<bool> stop{false};
  std::thread thread;
  AgentUnderTest(FakeController& controller, Parts& parts) {
    config.name = "node-a";
    config.data_dir = testing::temp_dir();
    config.data_network = "lo";
    config.data_allow_excluded = true;
    config.data_port = 0;
    config.controller_host = "127.0.0.1";
    config.controller_port = controller.port();
    config.heartbeat_ms = 100;
    config.peer_timeout_ms = 1000;
    config.gpus = DaemonConfig::GpuChoice::kNone;
    agent = std::make_unique<NodeAgent>(config, cluster_key(), parts.factory());
    thread = std::thread([this] { agent->run(stop); });
  }
  ~AgentUnderTest() {
    stop = true;
    thread.join();
  }
};

}  // namespace

TEST_CASE("a Start the node cannot carry out becomes Failed; a repeated Start is ignored") {
  FakeController controller;
  Parts parts;
  AgentUnderTest node(controller, parts);
  REQUIRE(wait_for([&] { return controller.registrations() == 1; }, 10s, "the registration"));
  controller.send(start_frame(7, start_named("good", 11)));
  controller.send(start_frame(7, start_named("good", 11)));  // the same Start again
  controller.send(start_frame(8, start_named("cannot", 12)));
  REQUIRE(wait_for([&] { return controller.reports(JobKind::Failed, 8).size() == 1; }, 10s,
                   "job 8's Failed report"));
  const JobMessageIn failed = controller.reports(JobKind::Failed, 8)[0];
  CHECK(failed.part == 12);
  const FailedReport& f = std::get<FailedReport>(failed.report);
  CHECK(f.error == "the node could not start its part: no GPU left for its workers");
  CHECK(f.fix.find("journalctl -u dtraind") != std::string::npos);
  CHECK_FALSE(f.cancelled);
  CHECK(parts.count() == 1);  // job 7 started once
  CHECK(controller.reports(JobKind::Failed, 7).empty());
}

TEST_CASE("a malformed frame from the controller is dropped and the session goes on") {
  FakeController controller;
  Parts parts;
  AgentUnderTest node(controller, parts);
  REQUIRE(wait_for([&] { return controller.registrations() == 1; }, 10s, "the registration"));
  controller.send({0x01, 0x02, 0x03, 0x04, 0xff});    // not a control frame
  controller.send(reply_ok({{"not", "a job message"}}));  // a frame of the wrong kind
  controller.send(start_frame(9, start_named("after", 21)));
  REQUIRE(wait_for([&] { return parts.count() == 1; }, 10s, "the Start after the bad frames"));
  CHECK(controller.registrations() == 1);  // the same session
}

TEST_CASE("reports queued while the controller is away go out in the next session") {
  FakeController controller;
  Parts parts;
  AgentUnderTest node(controller, parts);
  REQUIRE(wait_for([&] { return controller.registrations() == 1; }, 10s, "the registration"));
  controller.send(start_frame(5, start_named("long", 31)));
  REQUIRE(wait_for([&] { return parts.count() == 1; }, 10s, "job 5's part"));
  controller.end_session();
  FakePart* part = parts.started[0];
  part->report(LogReport{"while the controller was away"}, part->part);
  ResultReport result;
  result.rank = 0;
  result.iterations = 42;
  part->report(result, part->part);
  // The agent reconnects (every 2 s) and registers again, still running job 5.
  REQUIRE(wait_for([&] { return controller.registrations() == 2; }, 15s, "the second session"));
  CHECK(controller.registration(1).running_jobs == std::vector<uint64_t>{5});
  REQUIRE(wait_for([&] { return controller.reports(JobKind::Result, 5).size() == 1; }, 10s,
                   "job 5's result in the second session"));
  const JobMessageIn got = controller.reports(JobKind::Result, 5)[0];
  CHECK(got.part == 31);
  CHECK(std::get<ResultReport>(got.report).iterations == 42);
  const auto logs = controller.reports(JobKind::Log, 5);
  REQUIRE(logs.size() == 1);
  CHECK(std::get<LogReport>(logs[0].report).line == "while the controller was away");
}

}  // namespace dtrain::daemon
