#pragma once
// Who asks the controller (docs/operations.md, "Who may do what"): the identity the control
// channel authenticated, never a name the request carries. A client is known by its
// credential's name; the cluster key's holder (a daemon's key, or an operator using it) by
// kClusterKeyHolder, which no client name can equal. Operators (a credential made with
// `dtraind keygen --client NAME --operator`, or the cluster key) may act on every job; others
// on their own.
#include <string>

#include "transport/control/control_identity.h"

namespace dtrain::daemon {

// Not a client name: valid_client_name refuses spaces and parentheses.
inline const char* const kClusterKeyHolder = "(cluster key)";

// The default is nobody: it owns nothing and may act on no one's job.
struct Requester {
  std::string name;
  bool operator_role = false;

  static Requester of(const transport::ControlIdentity& who) {
    if (who.role != transport::ControlIdentity::Role::kClient)
      return Requester{kClusterKeyHolder, true};
    return Requester{who.name, who.operator_role};
  }
  // "client 'bob'", "operator 'carol'", "the cluster key's holder": for logs and refusals.
  std::string describe() const {
    if (name == kClusterKeyHolder) return "the cluster key's holder";
    if (name.empty()) return "an unknown requester";
    return (operator_role ? "operator '" : "client '") + name + "'";
  }
};

}  // namespace dtrain::daemon
