#pragma once
// Authenticates datagrams and control frames with the cluster key: a 16-byte Poly1305 tag from
// libsodium's XChaCha20-Poly1305 AEAD over the whole frame as associated data (nothing is
// encrypted: updates are not secret, but forged or altered ones must never be applied). The
// 24-byte nonce is (sender, boot id, counter), unique per key as long as a sender never reuses
// a counter within one boot, which the endpoint guarantees.
#include <cstddef>
#include <cstdint>

#include "transport/security/cluster_key.h"

namespace dtrain::transport {

constexpr size_t kTagBytes = 16;

class Authenticator {
 public:
  // insecure: no tags are computed or checked (benchmarks only; the endpoint logs it loudly).
  Authenticator(const ClusterKey& key, bool insecure);

  bool insecure() const { return insecure_; }
  // Writes the tag of frame[0, len) at frame + len.
  void seal(uint8_t* frame, size_t len, uint32_t sender, uint64_t boot_id, uint64_t counter) const;
  // True when frame[len, len + 16) is the tag of frame[0, len).
  bool verify(const uint8_t* frame, size_t len, uint32_t sender, uint64_t boot_id,
              uint64_t counter) const;

 private:
  ClusterKey key_;
  bool insecure_;
};

}  // namespace dtrain::transport
