// Who may say what to the controller (issue 13, daemon/README.md, "Credentials"), in one process
// over a real loopback control channel: a client credential may submit, query, cancel and read
// logs, and nothing else; it cannot register a node; a daemon with the cluster key registers.
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>

#include "daemon/controller/controller.h"
#include "daemon/protocol/control_messages.h"
#include "tests/test_util.h"
#include "transport/control/control_frames.h"
#include "transport/control/control_server.h"

using namespace dtrain;
using namespace std::chrono_literals;
using transport::ClusterKey;
using transport::ControlConnection;
using transport::ControlIdentity;

namespace {

ClusterKey key_of(uint8_t fill) {
  ClusterKey k;
  k.fill(fill);
  return k;
}

struct ControllerUnderTest {
  ControllerUnderTest() {
    config.name = "ctl";
    config.node = false;
    config.controller = true;
    config.data_dir = testing::temp_dir();
    controller = std::make_unique<daemon::Controller>(config);
    const ClusterKey cluster = key_of(1);
    server = std::make_unique<transport::ControlServer>(
        "127.0.0.1", 0,
        [cluster](const ControlIdentity& who, std::string& refusal) -> std::optional<ClusterKey> {
          if (who.role == ControlIdentity::Role::kDaemon) return cluster;
          if (who.name == "alice") return key_of(5);
          refusal = "not listed";
          return std::nullopt;
        },
        [this](ControlConnection& c) { controller->serve(c); }, 2s);
  }
  ~ControllerUnderTest() {
    server->stop();
    controller->stop();
  }
  std::unique_ptr<ControlConnection> as_alice() {
    return ControlConnection::connect("127.0.0.1", server->port(),
                                      {{ControlIdentity::Role::kClient, "alice"}, key_of(5)}, 5s);
  }
  std::unique_ptr<ControlConnection> as_daemon() {
    return ControlConnection::connect("127.0.0.1", server->port(), key_of(1), 5s);
  }
  daemon::DaemonConfig config;
  std::unique_ptr<daemon::Controller> controller;
  std::unique_ptr<transport::ControlServer> server;
};

daemon::NodeRegistration node_named(const std::string& name) {
  daemon::NodeRegistration n;
  n.name = name;
  n.address = "127.0.0.1";
  n.data_port = 40123;
  n.cores = 2;
  n.node_id = 77;
  n.boot_id = 1;
  return n;
}

// The controller's answer to a Register frame: its error, or "" when it took the node.
std::string register_reply(ControlConnection& c, const std::string& name) {
  c.send(daemon::register_frame(node_named(name)));
  const std::vector<uint8_t> reply = c.receive(5s);
  const auto& frame = transport::read_control_frame(reply);
  if (const auto* r = frame.body_as_Reply()) return r->ok() ? "" : (r->error() ? r->error()->str() : "?");
  return "";  // a job frame or heartbeat: the node session is open
}

}  // namespace

TEST_CASE("a client credential queries and submits, and nothing else") {
  ControllerUnderTest t;
  auto c = t.as_alice();
  const daemon::Json nodes = daemon::request(*c, "nodes", 0, daemon::Json::object(), 5s);
  CHECK(nodes.contains("nodes"));
  c = t.as_alice();
  CHECK(daemon::request(*c, "status", 0, daemon::Json::object(), 5s).contains("jobs"));
  c = t.as_alice();
  try {
    daemon::request(*c, "drain", 0, daemon::Json::object(), 5s);
    FAIL("a client asked for 'drain' and was answered");
  } catch (const daemon::RequestRefused& e) {
    CHECK(e.error().find("client credentials may submit, query, cancel and read logs") !=
          std::string::npos);
  }
}

TEST_CASE("a client credential cannot register a node; the cluster key can") {
  ControllerUnderTest t;
  auto c = t.as_alice();
  CHECK(register_reply(*c, "evil") == "a client credential cannot register a node");
  c = t.as_alice();
  const daemon::Json nodes = daemon::request(*c, "nodes", 0, daemon::Json::object(), 5s);
  CHECK(nodes["nodes"].empty());  // nothing was registered
  auto d = t.as_daemon();
  d->send(daemon::register_frame(node_named("node-a")));
  bool registered = false;
  for (int i = 0; i < 50 && !registered; ++i) {
    std::this_thread::sleep_for(20ms);
    auto q = t.as_alice();
    registered = daemon::request(*q, "nodes", 0, daemon::Json::object(), 5s)["nodes"].size() == 1;
  }
  CHECK(registered);
}
