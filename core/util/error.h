#pragma once
// Errors a user can cause (bad YAML, missing file, corrupt model) carry what happened and the fix.
// Broken invariants use DTRAIN_CHECK (check.h) instead.
#include <stdexcept>
#include <string>

namespace dtrain::core {

class UserError : public std::runtime_error {
 public:
  UserError(const std::string& what_happened, const std::string& fix)
      : std::runtime_error(fix.empty() ? what_happened : what_happened + "\n  fix: " + fix),
        what_happened_(what_happened),
        fix_(fix) {}
  const std::string& what_happened() const { return what_happened_; }
  const std::string& fix() const { return fix_; }

 private:
  std::string what_happened_;
  std::string fix_;
};

}  // namespace dtrain::core
