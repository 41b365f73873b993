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
  f.at = f.active() ? at : 0;
  return f;
}

std::string TestFault::description() const {
  if (kind == Kind::kApplyTwice) return "applies received message " + std::to_string(at) + " twice";
  if (kind == Kind::kSkip) return "skips received message " + std::to_string(at);
  return "none";
}

}  // namespace dtrain::core
