#pragma once
// An in-process controller on a real loopback control channel, with fake nodes and client
// credentials (alice and bob, users; carol, an operator), for the controller's unit tests
// (controller_roles_test, controller_test, job_ownership_test).
// A FakeNode registers with the cluster key and reads the job frames the controller sends it,
// as a node agent would, without training anything.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/controller/controller.h"
#include "daemon/protocol/control_messages.h"
#include "tests/test_util.h"
#include "daemon/protocol/control_frames.h"
#include "transport/control/control_server.h"

namespace dtrain::testing {

using namespace std::chrono_literals;

inline transport::ClusterKey key_of(uint8_t fill) {
  transport::ClusterKey k;
  k.fill(fill);
  return k;
}

struct ControllerUnderTest {
  // A fresh data directory, or `data_dir` (a restarted controller reads its jobs back).
  explicit ControllerUnderTest(std::string data_dir = "", int64_t peer_timeout_ms = 10000) {
    config.name = "ctl";
    config.node = false;
    config.controller = true;
    config.data_dir = data_dir.empty() ? temp_dir() : data_dir;
    config.peer_timeout_ms = peer_timeout_ms;
    config.task_outputs = {temp_dir()};  // where the tests' inference and ROC jobs may write
    controller = std::make_unique<daemon::Controller>(config);
    const transport::ClusterKey cluster = key_of(1);
    using transport::ControlIdentity;
    server = std::make_unique<transport::ControlServer>(
        "127.0.0.1", 0,
        [cluster](ControlIdentity& who,
                  std::string& refusal) -> std::optional<transport::ClusterKey> {
          if (who.role == ControlIdentity::Role::kDaemon) return cluster;
          if (auto key = client_key(who.name)) {
            who.operator_role = who.name == "carol";
            return key;
          }
          refusal = "not listed";
          return std::nullopt;
        },
        [this](transport::ControlConnection& c) { controller->serve(c); }, 2s);
  }
  ~ControllerUnderTest() {
    server->stop();
    controller->stop();
  }
  static std::optional<transport::ClusterKey> client_key(const std::string& name) {
    if (name == "alice") return key_of(5);
    if (name == "bob") return key_of(6);
    if (name == "carol") return key_of(7);
    return std::nullopt;
  }
  std::unique_ptr<transport::ControlConnection> as_client(const std::string& name) {
    return transport::ControlConnection::connect(
        "127.0.0.1", server->port(),
        {{transport::ControlIdentity::Role::kClient, name}, *client_key(name)}, 5s);
  }
  std::unique_ptr<transport::ControlConnection> as_alice() { return as_client("alice"); }
  std::unique_ptr<transport::ControlConnection> as_daemon() {
    return transport::ControlConnection::connect("127.0.0.1", server->port(), key_of(1), 5s);
  }
  // One client request (a connection each, as dtrain-submit does).
  daemon::Json ask(const daemon::ClientRequest& request) {
    auto c = as_alice();
    return daemon::request(*c, request, 5s);
  }
  daemon::Json ask(daemon::RequestKind kind, uint64_t job_id = 0) {
    return ask(daemon::client_request(kind, job_id));
  }
  // A job spec submitted as `source`.
  daemon::Json submit_spec(const std::string& spec, const std::string& source) {
    daemon::ClientRequest q = daemon::client_request(daemon::RequestKind::Submit);
    q.spec = spec;
    q.source = source;
    return ask(q);
  }
  daemon::Json job(uint64_t id) { return ask(daemon::RequestKind::Status, id); }

  daemon::DaemonConfig config;
  std::unique_ptr<daemon::Controller> controller;
  std::unique_ptr<transport::ControlServer> server;
};

inline daemon::NodeRegistration node_named(const std::string& name, uint32_t id = 77,
                                           uint64_t boot = 1) {
  daemon::NodeRegistration n;
  n.name = name;
  n.address = "127.0.0.1";
  n.data_port = 40123;
  n.cores = 2;
  n.node_id = id;
  n.boot_id = boot;
  return n;
}

// The controller's answer to a Register frame: its error (and in `fix` its fix), or "" when it
// took the node.
inline std::string register_reply(transport::ControlConnection& c,
                                  const daemon::NodeRegistration& node,
                                  std::string* fix = nullptr) {
  c.send(daemon::register_frame(node));
  const std::vector<uint8_t> reply = c.receive(5s);
  const auto& frame = daemon::read_control_frame(reply);
  if (const auto* r = frame.body_as_Reply()) {
    if (fix && r->fix()) *fix = r->fix()->str();
    return r->ok() ? "" : (r->error() ? r->error()->str() : "?");
  }
  return "";  // a job frame or heartbeat: the node session is open
}

class FakeNode {
 public:
  FakeNode(ControllerUnderTest& t, daemon::NodeRegistration node) : node_(std::move(node)) {
    connection = t.as_daemon();
    REQUIRE(register_reply(*connection, node_) == "");
  }
  // The next job message the controller sends (not its counts of what it read, Received, which
  // a node takes for itself); fails the test naming what it waited for.
  daemon::JobMessageIn next(std::chrono::milliseconds within = 5000ms) {
    if (pending_) {
      const daemon::JobMessageIn m = *pending_;
      pending_.reset();
      return m;
    }
    const auto deadline = std::chrono::steady_clock::now() + within;
    while (std::chrono::steady_clock::now() < deadline) {
      if (!connection->wait_readable(50ms)) continue;
      daemon::JobMessageIn m;
      if (daemon::read_job_message(connection->receive(5s), m) &&
          m.kind != daemon::JobKind::Received)
        return m;
    }
    FAIL("node " << node_.name << " got no job message within " << within.count() << " ms");
    return {};
  }
  // True when the controller sent nothing for `quiet`. The node heartbeats every 100 ms
  // meanwhile: with the 600 ms peer timeout some tests use, a wait that a loaded machine
  // stretches must not get a live node declared lost.
  bool quiet_for(std::chrono::milliseconds quiet) {
    if (pending_) return false;
    const auto end = std::chrono::steady_clock::now() + quiet;
    for (auto now = std::chrono::steady_clock::now(); now < end;
         now = std::chrono::steady_clock::now()) {
      heartbeat();
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - now);
      if (!connection->wait_readable(std::min<std::chrono::milliseconds>(100ms, left + 1ms)))
        continue;
      daemon::JobMessageIn m;
      if (!daemon::read_job_message(connection->receive(5s), m)) return false;
      if (m.kind == daemon::JobKind::Received) continue;
      pending_ = m;  // for next()
      return false;
    }
    return !pending_;
  }
  // A report about job_id, answering the Start with this part (0: none).
  void send(uint64_t job_id, const daemon::NodeReport& report, uint64_t part = 0) {
    connection->send(daemon::report_frame(job_id, report, part));
  }
  void heartbeat() { connection->send(daemon::heartbeat_frame()); }
  std::unique_ptr<transport::ControlConnection> connection;

 private:
  daemon::NodeRegistration node_;
  std::optional<daemon::JobMessageIn> pending_;  // read by quiet_for, not taken yet
};

}  // namespace dtrain::testing
