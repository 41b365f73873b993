#include "core/train/test_fault.h"

#include <cstdlib>

namespace dtrain::core {

TestFault TestFault::from_environment() {
  TestFault f;
  const char* value = std::getenv("DTRAIN_TEST_FAULT");
  if (!value) return f;
  const std::string text = value;
  const size_t colon = text.find(':');
  if (colon == std::string::npos) return f;
  const std::string kind = text.substr(0, colon);
  const int64_t at = std::atoll(text.c_str() + colon + 1);
  if (at < 1) return f;
  if (kind == "apply_twice") f.kind = Kind::kApplyTwice;
  else if (kind == "skip") f.kind = Kind::kSkip;
  else if (kind == "exit_in_epoch") f.kind = Kind::kExitInEpoch;
  else if (kind == "auto_allreduce") f.kind = Kind::kAutoAllreduce;
  else if (kind == "slow_steps" && at <= 1000) f.kind = Kind::kSlowSteps;
  f.at = f.active() ? at : 0;
  return f;
}

bool TestFault::exits_at(int64_t epoch, int64_t in_epoch, int64_t per_epoch) const {
  return kind == Kind::kExitInEpoch && epoch + 1 == at && 3 * (in_epoch + 1) >= per_epoch;
}

std::string TestFault::description() const {
  const std::string k = std::to_string(at);
  if (kind == Kind::kApplyTwice)
    return "this node's lead worker applies received message " + k + " twice";
  if (kind == Kind::kSkip) return "this node's lead worker skips received message " + k;
  if (kind == Kind::kExitInEpoch)
    return "this daemon ends itself with SIGKILL a third of the way into epoch " + k + " of a job";
  if (kind == Kind::kAutoAllreduce)
    return "a job of training.mode auto whose choice this node makes takes allreduce";
  if (kind == Kind::kSlowSteps)
    return "each step of a job's lead worker on this node takes " + k + " ms more";
  return "none";
}

}  // namespace dtrain::core
