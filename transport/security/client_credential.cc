#include "transport/security/client_credential.h"

#include <sodium.h>

#include <filesystem>
#include <sstream>
#include <vector>

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
  std::string first, hex;
  std::getline(in, first);
  std::istringstream header(first);
  std::vector<std::string> words;
  for (std::string w; words.size() < 4 && header >> w;) words.push_back(w);
  ClientCredential c;
  if (words.size() >= 2) c.name = words[1];
  const std::string role = words.size() == 3 ? words[2] : "";
  if (words.size() < 2 || words.size() > 3 || words[0] != "dtrain-client" ||
      !valid_client_name(c.name) || (words.size() == 3 && role != "operator"))
    throw TransportError("the client credential " + path +
                             " does not start with `dtrain-client NAME` or `dtrain-client NAME "
                             "operator`",
                         "use a file made by `" + make + "`");
  c.operator_role = role == "operator";
  in >> hex;
  c.key = parse_key_hex(hex, path, "the client credential", make);
  return c;
}

void generate_client_credential(const std::string& path, const std::string& name,
                                bool operator_role) {
  if (!valid_client_name(name))
    throw TransportError("'" + name + "' is not a client name",
                         "use 1 to 64 letters, digits, '-', '_' or '.'");
  ClusterKey key = random_key();
  write_secret_file(path, "dtrain-client " + name + (operator_role ? " operator" : "") + "\n" +
                              key_hex(key) + "\n");
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
    if (list.clients_.size() == kMaxClients)
      throw TransportError(dir + " holds more than " + std::to_string(kMaxClients) + " clients",
                           "remove the credentials of clients that left");
    const ClientCredential c = load_client_credential(path.string());
    if (c.name != path.stem().string())
      throw TransportError("the credential " + path.string() + " is for client '" + c.name + "'",
                           "name the file " + c.name + ".cred");
    list.clients_[c.name] = c;
  }
  return list;
}

std::string ClientList::digest() const {
  crypto_generichash_state state;
  unsigned char out[16];
  crypto_generichash_init(&state, nullptr, 0, sizeof out);
  for (const auto& [name, c] : clients_) {  // std::map: name order
    const unsigned char role = c.operator_role ? 1 : 0;
    crypto_generichash_update(&state, reinterpret_cast<const unsigned char*>(name.c_str()),
                              name.size() + 1);  // with its '\0': names cannot run together
    crypto_generichash_update(&state, &role, 1);
    crypto_generichash_update(&state, c.key.data(), c.key.size());
  }
  crypto_generichash_final(&state, out, sizeof out);
  char hex[2 * sizeof out + 1];
  sodium_bin2hex(hex, sizeof hex, out, sizeof out);
  return hex;
}

std::optional<ClusterKey> ClientList::key_of(const std::string& name) const {
  auto it = clients_.find(name);
  if (it == clients_.end()) return std::nullopt;
  return it->second.key;
}

bool ClientList::is_operator(const std::string& name) const {
  auto it = clients_.find(name);
  return it != clients_.end() && it->second.operator_role;
}

}  // namespace dtrain::transport
