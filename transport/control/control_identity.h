#pragma once
// Who is at the other end of a control connection (docs/architecture/transport.md, "The control
// channel"): a daemon, proven with the cluster key, or a named client, proven with its own
// credential. The client names itself in its hello; the server looks up the key to check that claim
// with (KeyLookup) and refuses names it does not know before any frame is read.
#include <functional>
#include <optional>
#include <string>

#include "transport/security/cluster_key.h"

namespace dtrain::transport {

struct ControlIdentity {
  enum class Role : uint8_t { kDaemon = 'D', kClient = 'C' };
  Role role = Role::kDaemon;
  std::string name;  // a client's name; empty for daemons (a node names itself when it registers)
  // Set by the server's KeyLookup, never by what the client says: a client whose credential
  // the server lists as an operator's (docs/operations.md, "Who may do what").
  bool operator_role = false;
  std::string describe() const { return role == Role::kDaemon ? "a daemon" : "client '" + name + "'"; }
};

// What a connecting side proves itself with.
struct ControlCredential {
  ControlIdentity identity;
  ClusterKey key{};
  static ControlCredential daemon(const ClusterKey& cluster_key) { return {{}, cluster_key}; }
};

// The server's side: the key that proves `who`, or nullopt with `refusal` set to why not (an
// unknown or revoked client, or a role this server does not serve). It may grant `who` the
// operator role.
using KeyLookup = std::function<std::optional<ClusterKey>(ControlIdentity& who,
                                                          std::string& refusal)>;

// Daemons with the cluster key only (what a node's own control server, and tests, take).
inline KeyLookup daemons_only(const ClusterKey& cluster_key) {
  return [cluster_key](const ControlIdentity& who, std::string& refusal) -> std::optional<ClusterKey> {
    if (who.role == ControlIdentity::Role::kDaemon) return cluster_key;
    refusal = "this server takes no client credentials";
    return std::nullopt;
  };
}

}  // namespace dtrain::transport
