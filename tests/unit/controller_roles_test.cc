// Who may say what to the controller (docs/architecture/daemon.md, "Credentials"), in one process
// over a real loopback control channel: a client credential may submit, query, cancel and read
// logs (the requests, whose kinds are an enum), and nothing else; it cannot register a node; a
// daemon with the cluster key registers.
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>

#include "tests/unit/controller_harness.h"
#include "transport/control/control_handshake.h"

using namespace dtrain;
using namespace dtrain::testing;
using namespace std::chrono_literals;

namespace {
std::string register_reply(transport::ControlConnection& c, const std::string& name) {
  return testing::register_reply(c, node_named(name));
}
}  // namespace

TEST_CASE("a client credential queries and submits, and nothing else") {
  ControllerUnderTest t;
  auto c = t.as_alice();
  const daemon::Json nodes =
      daemon::request(*c, daemon::client_request(daemon::RequestKind::Nodes), 5s);
  CHECK(nodes.contains("nodes"));
  c = t.as_alice();
  CHECK(daemon::request(*c, daemon::client_request(daemon::RequestKind::Status), 5s)
            .contains("jobs"));
  // A kind this release does not know (a later release's, or a forged byte): refused, naming
  // the protocol to speak.
  for (const auto kind : {daemon::RequestKind::Unknown, static_cast<daemon::RequestKind>(200)}) {
    c = t.as_alice();
    try {
      daemon::request(*c, daemon::client_request(kind), 5s);
      FAIL("a client asked for request kind " << int(kind) << " and was answered");
    } catch (const daemon::RequestRefused& e) {
      CHECK(e.error() == "unknown request kind " + std::to_string(int(kind)));
      CHECK(e.fix().find("control protocol " + std::to_string(transport::kControlVersion)) !=
            std::string::npos);
    }
  }
}

TEST_CASE("a client credential cannot register a node; the cluster key can") {
  ControllerUnderTest t;
  auto c = t.as_alice();
  CHECK(register_reply(*c, "evil") == "a client credential cannot register a node");
  c = t.as_alice();
  const daemon::Json nodes = daemon::request(*c, daemon::client_request(daemon::RequestKind::Nodes), 5s);
  CHECK(nodes["nodes"].empty());  // nothing was registered
  auto d = t.as_daemon();
  d->send(daemon::register_frame(node_named("node-a")));
  bool registered = false;
  for (int i = 0; i < 50 && !registered; ++i) {
    std::this_thread::sleep_for(20ms);
    auto q = t.as_alice();
    registered = daemon::request(*q, daemon::client_request(daemon::RequestKind::Nodes), 5s)["nodes"].size() == 1;
  }
  CHECK(registered);
}

TEST_CASE("a registration whose name or data address no job could use is refused by name") {
  ControllerUnderTest t;
  daemon::NodeRegistration bad = node_named("node-x");
  bad.address = "not-an-ip";
  auto d = t.as_daemon();
  CHECK(testing::register_reply(*d, bad) ==
        "node node-x registered with a data address that is not an IP address");
  bad = node_named("node\x1b[2Jx");  // a terminal escape in a name bound for logs
  d = t.as_daemon();
  CHECK(testing::register_reply(*d, bad) ==
        "a node registered with a name that is not 1 to 64 printable characters");
  bad = node_named("node-y");
  bad.data_port = 0;
  d = t.as_daemon();
  CHECK(testing::register_reply(*d, bad) == "node node-y registered with data port 0");
  auto c = t.as_alice();
  CHECK(daemon::request(*c, daemon::client_request(daemon::RequestKind::Nodes), 5s)["nodes"]
            .empty());  // none of them was taken
  bad = node_named("::1-is-fine");
  bad.address = "::1";  // IPv6 is an IP address
  d = t.as_daemon();
  CHECK(testing::register_reply(*d, bad) == "");
}

TEST_CASE("a client's first frame is small; a task's model follows only as its request announced") {
  ControllerUnderTest t;
  // A request frame beyond the client limit (a 2 MiB spec): the connection is closed before
  // the frame is read, and the controller goes on serving.
  auto c = t.as_alice();
  daemon::ClientRequest huge = daemon::client_request(daemon::RequestKind::Submit);
  huge.spec = std::string(2 << 20, 'x');
  CHECK_THROWS_AS((c->send(daemon::request_frame(huge), 5s), c->receive(5s)),  // either end
                  transport::ControlError);
  c = t.as_alice();
  CHECK(daemon::request(*c, daemon::client_request(daemon::RequestKind::Nodes), 5s)
            .contains("nodes"));
  auto refusal = [&](daemon::ClientRequest q, const std::vector<uint8_t>& data_frame) {
    auto conn = t.as_alice();
    conn->send(daemon::request_frame(q), 5s);
    if (!data_frame.empty()) conn->send(data_frame, 5s);
    const std::vector<uint8_t> reply = conn->receive(5s);
    const daemon::control::Reply* r = daemon::read_control_frame(reply).body_as_Reply();
    REQUIRE(r);
    CHECK_FALSE(r->ok());
    return r->error() ? r->error()->str() : std::string();
  };
  // Data announced by a request that brings none.
  daemon::ClientRequest status = daemon::client_request(daemon::RequestKind::Status);
  status.data = daemon::shared_bytes({1, 2, 3});
  CHECK(refusal(status, daemon::request_data_frame(*status.data)) ==
        "a status request announced 3 bytes of data; only a task brings any (its model)");
  // A task announcing more than a request may bring: refused before any of it is read.
  daemon::ClientRequest task = daemon::client_request(daemon::RequestKind::Task);
  task.task = daemon::TaskRequest{};
  task.data = daemon::shared_bytes(std::vector<uint8_t>(daemon::kMaxRequestDataBytes + 1, 0));
  CHECK(refusal(task, {}).find("is larger than the") != std::string::npos);
  // A data frame that is not what was announced.
  task.data = daemon::shared_bytes({9, 9, 9, 9});
  CHECK(refusal(task, daemon::request_data_frame({9, 9})) ==
        "the task's model did not follow its request as announced (4 bytes)");
}
