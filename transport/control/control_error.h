#pragma once
// Why a control-channel call failed, told apart so that callers can act on it (dtrain-submit
// exits 3 when the controller cannot be reached, 2 on a key that does not match).
#include <string>

#include "transport/transport_error.h"

namespace dtrain::transport {

class ControlError : public TransportError {
 public:
  enum class Kind {
    kUnreachable,     // nothing listening, no route, or the connect timed out
    kAuthentication,  // the other side does not hold our cluster key (or a frame was forged)
    kTimeout,         // connected, but the other side did not answer in time
    kClosed,          // the other side closed the connection
    kMalformed,       // a frame that is not ours: bad magic, oversized, not a ControlFrame
  };
  ControlError(Kind kind, const std::string& what_happened, const std::string& fix)
      : TransportError(what_happened, fix), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

}  // namespace dtrain::transport
