#pragma once
// Errors a user or operator can cause in the transport (a key file with loose permissions, an
// interface that does not exist, a port in use): what happened, and the fix. transport/ does
// not depend on core/, so this mirrors core::UserError.
#include <stdexcept>
#include <string>

namespace dtrain::transport {

class TransportError : public std::runtime_error {
 public:
  TransportError(const std::string& what_happened, const std::string& fix)
      : std::runtime_error(what_happened + "\n  fix: " + fix), fix_(fix) {}
  const std::string& fix() const { return fix_; }

 private:
  std::string fix_;
};

}  // namespace dtrain::transport
