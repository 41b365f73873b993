// Who may act on a job (docs/operations.md, "Who may do what"), in one process over a real
// loopback control channel: the job records the authenticated identity that submitted it;
// another client's log, stats, fetch, cancel and resume of it are refused naming the owner and
// who else may, while listing and its state stay open; an operator credential and the cluster
// key may act on it; every change says who asked.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>

#include "daemon/controller/job_access.h"
#include "tests/unit/controller_harness.h"

using namespace dtrain;
using namespace dtrain::testing;
using namespace std::chrono_literals;

namespace {

const char* const kSpec =
    "name: owned\nmodel:\n  input: [4]\n  layers:\n"
    "    - output: {units: 3, activation: softmax, loss: mcxent}\n"
    "data:\n  train: {format: csv, path: none.csv}\ntraining:\n  nodes: 1\n";

daemon::Json ask_as(ControllerUnderTest& t, const std::string& who, daemon::ClientRequest q) {
  auto c = t.as_client(who);
  return daemon::request(*c, q, 5s);
}

// The refusal's error, or "(accepted)".
std::string refusal(ControllerUnderTest& t, const std::string& who, daemon::ClientRequest q) {
  try {
    ask_as(t, who, q);
  } catch (const daemon::RequestRefused& e) {
    CHECK(e.fix().find("dtraind keygen --client NAME --operator") != std::string::npos);
    return e.error();
  }
  return "(accepted)";
}

bool log_has(const daemon::Json& logs, const std::string& line) {
  for (const auto& l : logs.at("log"))
    if (l.get<std::string>().find(line) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("a job is its submitter's: others are refused, operators and the cluster key are not") {
  ControllerUnderTest t;
  FakeNode a(t, node_named("node-a", 1));
  daemon::ClientRequest submit = daemon::client_request(daemon::RequestKind::Submit);
  submit.spec = kSpec;
  submit.source = "job.yaml";
  const daemon::Json submitted = ask_as(t, "alice", submit);
  CHECK(submitted.at("owner") == "alice");
  uint64_t id = 0;
  REQUIRE(daemon::parse_job_id(submitted.at("id").get<std::string>(), id));
  REQUIRE(a.next().kind == daemon::JobKind::Start);
  const std::string text = daemon::job_id_text(id);
  using daemon::RequestKind;

  // bob may see that it exists and its state, and nothing more.
  CHECK(ask_as(t, "bob", daemon::client_request(RequestKind::Status, id)).at("owner") == "alice");
  CHECK(ask_as(t, "bob", daemon::client_request(RequestKind::Status)).at("jobs").size() == 1);
  const std::string owner = " job " + text + ": it belongs to client 'alice'";
  daemon::ClientRequest follow = daemon::client_request(RequestKind::Status, id);
  follow.log_from = 0;
  CHECK(refusal(t, "bob", follow) == "client 'bob' may not read the log of" + owner);
  CHECK(refusal(t, "bob", daemon::client_request(RequestKind::Logs, id)) ==
        "client 'bob' may not read the log of" + owner);
  CHECK(refusal(t, "bob", daemon::client_request(RequestKind::Stats, id)) ==
        "client 'bob' may not read the stats of" + owner);
  CHECK(refusal(t, "bob", daemon::client_request(RequestKind::Fetch, id)) ==
        "client 'bob' may not fetch the model of" + owner);
  CHECK(refusal(t, "bob", daemon::client_request(RequestKind::Resume, id)) ==
        "client 'bob' may not resume" + owner);
  CHECK(refusal(t, "bob", daemon::client_request(RequestKind::Cancel, id)) ==
        "client 'bob' may not cancel" + owner);
  CHECK(t.job(id).at("state") == "running");  // bob's cancel changed nothing

  // alice and carol (an operator) read it; the cluster key's holder too.
  CHECK(refusal(t, "alice", daemon::client_request(RequestKind::Logs, id)) == "(accepted)");
  CHECK(refusal(t, "carol", daemon::client_request(RequestKind::Stats, id)) == "(accepted)");
  auto d = t.as_daemon();
  const daemon::Json logs = daemon::request(*d, daemon::client_request(RequestKind::Logs, id), 5s);
  CHECK(log_has(logs, "submitted (job.yaml) by client 'alice'"));

  // carol cancels it, and the log says who did.
  CHECK(ask_as(t, "carol", daemon::client_request(RequestKind::Cancel, id)).contains("state"));
  CHECK(log_has(ask_as(t, "alice", daemon::client_request(RequestKind::Logs, id)),
                "cancel requested by operator 'carol'"));
}

TEST_CASE("a job of a release before owners is for operators only") {
  daemon::JobRecord old;
  old.id = 0x01d;
  old.state = daemon::JobState::kSucceeded;
  daemon::Requester alice{"alice", false}, carol{"carol", true};
  const auto no = daemon::access_refusal(old, alice, "cancel");
  REQUIRE(no);
  CHECK(no->what_happened() == "client 'alice' may not cancel job " +
                                   daemon::job_id_text(old.id) +
                                   ": it belongs to no owner on record (a job of a release "
                                   "before owners)");
  CHECK_FALSE(daemon::access_refusal(old, carol, "cancel"));
  old.owner = "alice";
  CHECK_FALSE(daemon::access_refusal(old, alice, "cancel"));
  // A requester the controller could not name owns nothing, not even a job without an owner.
  old.owner = "";
  CHECK(daemon::access_refusal(old, daemon::Requester{}, "cancel"));
  // The cluster key's holder is an operator, and owns what it submits.
  const daemon::Requester key = daemon::Requester::of(transport::ControlIdentity{});
  CHECK(key.name == daemon::kClusterKeyHolder);
  CHECK_FALSE(daemon::access_refusal(old, key, "cancel"));
}
