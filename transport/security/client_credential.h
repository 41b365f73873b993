#pragma once
// Client credentials (docs/architecture/daemon.md, "Credentials"): users of dtrain-submit hold
// one instead of the cluster key, which stays with the daemons. A credential is a name, a role
// and a 32-byte key in a file of mode 0600:
//   dtrain-client NAME [operator]
//   <64 hex digits>
// made by `dtraind keygen --client NAME [--operator] FILE`. An operator may act on every job
// (docs/operations.md, "Who may do what"); the controller reads the role from its own copy. The controller lets in the clients whose
// credential files lie in its `clients_dir` (NAME.cred); revoking one is deleting its file and
// sending the controller SIGHUP.
#include <map>
#include <optional>
#include <string>

#include "transport/security/cluster_key.h"

namespace dtrain::transport {

struct ClientCredential {
  std::string name;
  ClusterKey key{};
  bool operator_role = false;
};

// 1 to 64 of letters, digits, '-', '_' and '.'.
bool valid_client_name(const std::string& name);

// Throws TransportError naming the problem and the fix.
ClientCredential load_client_credential(const std::string& path);
void generate_client_credential(const std::string& path, const std::string& name,
                                bool operator_role = false);

// The clients a controller lets in: every *.cred file in a folder, by name.
class ClientList {
 public:
  static constexpr size_t kMaxClients = 10000;
  // An empty list when `dir` is empty. Throws TransportError for a file that is not a
  // credential, or one whose name differs from its file name.
  static ClientList load(const std::string& dir);
  std::optional<ClusterKey> key_of(const std::string& name) const;
  bool is_operator(const std::string& name) const;
  size_t size() const { return clients_.size(); }
  // 32 hex digits that differ when any name, role or key differs (BLAKE2b over them in name
  // order): standby controllers compare their lists by it without showing a key.
  std::string digest() const;

 private:
  std::map<std::string, ClientCredential> clients_;
};

}  // namespace dtrain::transport
