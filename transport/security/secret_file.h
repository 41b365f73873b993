#pragma once
// Files that hold a secret (the cluster key, client credentials): readable by their owner only
// (mode 0600, or they are refused), written once (never overwritten) and fsynced.
#include <string>

#include "transport/security/cluster_key.h"

namespace dtrain::transport {

// The file's text. `what` names it in errors ("the cluster key", "the client credential");
// `missing_fix` is the fix when there is no such file.
std::string read_secret_file(const std::string& path, const std::string& what,
                             const std::string& missing_fix);
// 64 hex digits (whitespace ignored) as a key; throws naming `what` and `path` otherwise.
ClusterKey parse_key_hex(const std::string& hex, const std::string& path, const std::string& what,
                         const std::string& make);
// A fresh random key.
ClusterKey random_key();
// Writes `text` to a new file of mode 0600 (refuses to overwrite one) and fsyncs it.
void write_secret_file(const std::string& path, const std::string& text);
std::string key_hex(const ClusterKey& key);

}  // namespace dtrain::transport
