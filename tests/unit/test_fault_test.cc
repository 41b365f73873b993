// DTRAIN_TEST_FAULT as the daemon reads it (core/train/test_fault.h): the kinds a test names,
// values it ignores, and where exit_in_epoch ends a node.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "core/train/test_fault.h"

using namespace dtrain;

namespace {

core::TestFault with(const char* value) {
  if (value) setenv("DTRAIN_TEST_FAULT", value, 1);
  else unsetenv("DTRAIN_TEST_FAULT");
  core::TestFault f = core::TestFault::from_environment();
  unsetenv("DTRAIN_TEST_FAULT");
  return f;
}

}  // namespace

TEST_CASE("no DTRAIN_TEST_FAULT and unreadable values are no fault") {
  for (const char* value : {static_cast<const char*>(nullptr), "", "apply_twice", "skip:0",
                            "exit_in_epoch:-1", "explode:3", "apply_twice:x"}) {
    INFO(std::string(value ? value : "(unset)"));
    const core::TestFault f = with(value);
    CHECK_FALSE(f.active());
    CHECK_FALSE(f.on_message());
    CHECK_FALSE(f.exits_at(0, 100, 100));
  }
}

TEST_CASE("apply_twice and skip change a received message, never end the node") {
  const core::TestFault twice = with("apply_twice:40");
  CHECK(twice.on_message());
  CHECK(twice.at == 40);
  CHECK(twice.description() == "this node's lead worker applies received message 40 twice");
  CHECK_FALSE(twice.exits_at(39, 50, 100));
  const core::TestFault skip = with("skip:7");
  CHECK(skip.on_message());
  CHECK_FALSE(skip.exits_at(6, 50, 100));
}

TEST_CASE("exit_in_epoch ends the node a third of the way into that epoch, and only there") {
  const core::TestFault f = with("exit_in_epoch:5");
  REQUIRE(f.active());
  CHECK_FALSE(f.on_message());  // received messages are applied as they are
  // Epochs are 0-based in the training loop, 1-based in the variable: epoch index 4.
  CHECK_FALSE(f.exits_at(3, 80, 90));
  CHECK_FALSE(f.exits_at(4, 28, 90));  // minibatch 29 of 90
  CHECK(f.exits_at(4, 29, 90));        // minibatch 30 of 90: a third
  CHECK(f.exits_at(4, 31, 90));        // a step the reporter saw late still ends it
  CHECK_FALSE(f.exits_at(5, 0, 90));   // a node restarted into a later epoch goes on
  CHECK(f.description() ==
        "this daemon ends itself with SIGKILL a third of the way into epoch 5 of a job");
}

TEST_CASE("auto_allreduce only names mode auto's choice") {
  const core::TestFault f = with("auto_allreduce:1");
  REQUIRE(f.active());
  CHECK(f.kind == core::TestFault::Kind::kAutoAllreduce);
  CHECK_FALSE(f.on_message());
  CHECK_FALSE(f.exits_at(0, 99, 100));
  CHECK(f.description() ==
        "a job of training.mode auto whose choice this node makes takes allreduce");
}

TEST_CASE("slow_steps names the milliseconds a step takes more, at most a second") {
  const core::TestFault f = with("slow_steps:6");
  REQUIRE(f.active());
  CHECK(f.kind == core::TestFault::Kind::kSlowSteps);
  CHECK(f.at == 6);
  CHECK_FALSE(f.on_message());
  CHECK_FALSE(f.exits_at(0, 99, 100));
  CHECK(f.description() == "each step of a job's lead worker on this node takes 6 ms more");
  CHECK_FALSE(with("slow_steps:5000").active());  // a typo, not a job that never ends
}
