#pragma once
// A fault a test injects into a node's gradient sharing on purpose, to show that the cluster's
// checks catch it (tests/cluster/result_guard_test): DTRAIN_TEST_FAULT=apply_twice:K in dtraind's
// environment makes its lead worker apply the K-th message it receives from another worker
// twice, and skip:K makes it drop that message. Unset (always, outside such a test): nothing
// happens. Only the daemon reads it (LocalTrainingOptions::test_fault), and warns in its log.
#include <cstdint>
#include <string>

namespace dtrain::core {

struct TestFault {
  enum class Kind { kNone, kApplyTwice, kSkip };
  Kind kind = Kind::kNone;
  int64_t at = 0;  // the K-th received message, 1-based

  // From DTRAIN_TEST_FAULT; an unreadable value is no fault (and `description` says why).
  static TestFault from_environment();
  bool active() const { return kind != Kind::kNone; }
  // "applies received message 3 twice", for the daemon's warning.
  std::string description() const;
};

}  // namespace dtrain::core
