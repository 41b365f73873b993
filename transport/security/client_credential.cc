#include "transport/security/client_credential.h"

#include <sodium.h>

#include <filesystem>
#include <sstream>

#include "transport/security/secret_file.h"
#include "transport/transport_error.h"

namespace dtrain::transport {

bool valid_client_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.')
      return false;
  return true;
}

ClientCredential load_client_credential(const std::string& path) {
  const std::string make = "dtraind keygen --client NAME " + path;
  const std::string text = read_secret_file(
      path, "the client credential",
      "ask the cluster's operator for one (`" + make + "` on the controller)");
  std::istringstream in(text);
  std::string tag, hex;
  ClientCredential c;
  in >> tag >> c.name >> hex;
  if (tag != "dtrain-client" || !valid_client_name(c.name))
    throw TransportError("the client credential " + path +
                             " does not start with `dtrain-client NAME`",
                         "use a file made by `" + make + "`");
  c.key = parse_key_hex(hex, path, "the client credential", make);
  return c;
}

void generate_client_credential(const std::string& path, const std::string& name) {
  if (!valid_client_name(name))
    throw TransportError("'" + name + "' is not a client name",
                         "use 1 to 64 letters, digits, '-', '_' or '.'");
  ClusterKey key = random_key();
  write_secret_file(path, "dtrain-client " + name + "\n" + key_hex(key) + "\n");
  sodium_memzero(key.data(), key.size());
}

ClientList ClientList::load(const std::string& dir) {
  ClientList list;
  if (dir.empty()) return list;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec), end;
  if (ec)
    throw TransportError("cannot read clients_dir " + dir + ": " + ec.message(),
                         "create it (mode 0700) and put the clients' .cred files in it");
  for (; it != end; it.increment(ec)) {
    if (ec) break;
    const auto& path = it->path();
    if (path.extension() != ".cred") continue;
    if (list.keys_.size() == kMaxClients)
      throw TransportError(dir + " holds more than " + std::to_string(kMaxClients) + " clients",
                           "remove the credentials of clients that left");
    const ClientCredential c = load_client_credential(path.string());
    if (c.name != path.stem().string())
      throw TransportError("the credential " + path.string() + " is for client '" + c.name + "'",
                           "name the file " + c.name + ".cred");
    list.keys_[c.name] = c.key;
  }
  return list;
}

std::optional<ClusterKey> ClientList::key_of(const std::string& name) const {
  auto it = keys_.find(name);
  if (it == keys_.end()) return std::nullopt;
  return it->second;
}

}  // namespace dtrain::transport
