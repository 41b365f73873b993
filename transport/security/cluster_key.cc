#include "transport/security/cluster_key.h"

#include <sodium.h>

#include "transport/security/secret_file.h"

namespace dtrain::transport {

ClusterKey load_cluster_key(const std::string& path) {
  const std::string make = "dtraind keygen " + path;
  const std::string text = read_secret_file(
      path, "the cluster key", "create one with `" + make + "` and copy it to every machine (mode 0600)");
  return parse_key_hex(text, path, "the cluster key", make);
}

void generate_cluster_key(const std::string& path) {
  ClusterKey key = random_key();
  write_secret_file(path, key_hex(key) + "\n");
  sodium_memzero(key.data(), key.size());
}

}  // namespace dtrain::transport
