#pragma once
// The cluster key: 32 random bytes shared by every daemon and dtrain-submit, kept in a file of
// 64 hex digits that only its owner may read (mode 0600). It authenticates every datagram and
// control frame (transport/security/authenticator.h).
#include <array>
#include <cstdint>
#include <string>

namespace dtrain::transport {

using ClusterKey = std::array<uint8_t, 32>;

// Reads and checks the key file; throws TransportError naming the problem and the fix (missing
// file, readable by group or others, wrong length or characters).
ClusterKey load_cluster_key(const std::string& path);

// Writes a fresh random key to `path` with mode 0600 (refuses to overwrite an existing file).
void generate_cluster_key(const std::string& path);

}  // namespace dtrain::transport
