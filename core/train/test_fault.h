#pragma once
// A fault a test injects into a node's gradient sharing on purpose, to show that the cluster's
// checks catch it (tests/cluster/result_guard_test): DTRAIN_TEST_FAULT=apply_twice:K in dtraind's
// environment makes its lead worker apply the K-th message it receives from another worker
// twice, and skip:K makes it drop that message. exit_in_epoch:E makes the daemon end its own
// process with SIGKILL a third of the way into epoch E (1-based) of a job, so that a test loses a
// node at a known point of an epoch (minibatches left to take over, epoch ends left to rejoin
// at) however fast the job runs. auto_allreduce:1 makes a job of `training.mode: auto` whose
// choice this node makes take allreduce whatever it measured (the reason says so), so that a test
// trains allreduce after the rehearsal on hosts where gradient sharing wins. slow_steps:MS makes
// each step of a job's lead worker on this node take MS ms more, so that a job outlasts a test's
// phases however fast the machine (tests/deploy/controller_failover_test). Unset (always,
// outside such a test): nothing happens. Only the daemon reads it
// (LocalTrainingOptions::test_fault, the progress reporter), and warns in its log.
#include <cstdint>
#include <string>

namespace dtrain::core {

struct TestFault {
  enum class Kind { kNone, kApplyTwice, kSkip, kExitInEpoch, kAutoAllreduce, kSlowSteps };
  Kind kind = Kind::kNone;
  int64_t at = 0;  // the K-th received message or the epoch E, 1-based; slow_steps: the ms

  // From DTRAIN_TEST_FAULT; an unreadable value is no fault (and `description` says why).
  static TestFault from_environment();
  bool active() const { return kind != Kind::kNone; }
  // Whether the K-th received message is the one to change (apply_twice, skip).
  bool on_message() const { return kind == Kind::kApplyTwice || kind == Kind::kSkip; }
  // Whether a lead worker at minibatch `in_epoch` (0-based) of `per_epoch` in epoch `epoch`
  // (0-based) is where exit_in_epoch ends the process.
  bool exits_at(int64_t epoch, int64_t in_epoch, int64_t per_epoch) const;
  // "this node's lead worker applies received message 3 twice", for the daemon's warning.
  std::string description() const;
};

}  // namespace dtrain::core
