#pragma once
// Authenticates datagrams with the cluster key: a 16-byte tag over the whole datagram as
// associated data (nothing is encrypted: updates are not secret, but forged or altered ones must
// never be applied). Two AEADs, chosen per datagram by a header flag:
//
// - XChaCha20-Poly1305 (every node): nonce = (sender, receiver, boot id) | counter. Its first 16
//   bytes are fixed for one direction of a link and one boot, so the HChaCha20 subkey is derived
//   once and each datagram costs a ChaCha20-Poly1305 (IETF) tag under it: the same bytes as
//   libsodium's one-shot XChaCha20-Poly1305 (tests/transport/wire_test checks it), 20% cheaper.
// - AES-256-GCM (nodes whose CPU has AES-NI and CLMUL; a sender uses it only towards a peer that
//   said in its heartbeat that it accepts it): key = BLAKE2b(cluster key, salt = sender,
//   receiver, boot id; personal = "dtrain-data-gcm"), nonce = counter. On x86 CPUs with AES-NI
//   and CLMUL (libsodium 1.0.18 has no other), per 1.4 KB on this project's build machine:
//   0.24 us, against 0.51 us for the cached-subkey XChaCha20-Poly1305 (0.63 us one-shot).
//
// A (sender, receiver, boot) key is used by one sender boot only, and the endpoint never reuses a
// counter within a boot (a boot id is drawn at random per endpoint and must never be reused), so
// no nonce repeats under any key. Derived keys are cached: those this node seals with, and
// those of datagrams addressed to it whose tag held. A datagram that fails its tag, or is
// addressed to another node (a replay from elsewhere), leaves nothing in the cache, so neither
// forgeries nor replays of other links' traffic can fill it.
// Not thread-safe, although seal and verify are const (the cache is an implementation detail):
// one endpoint's I/O thread owns its Authenticator; seal_with and check_with (below) are how
// other threads share its work.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "transport/security/cluster_key.h"

namespace dtrain::transport {

constexpr size_t kTagBytes = 16;

enum class Aead : uint8_t { kXChaCha20Poly1305 = 0, kAes256Gcm = 1 };
const char* aead_name(Aead aead);

// What a datagram's nonce and key are made of (all in the authenticated header).
struct TagContext {
  uint32_t sender = 0;
  uint32_t receiver = 0;
  uint64_t boot_id = 0;
  uint64_t counter = 0;
  Aead aead = Aead::kXChaCha20Poly1305;
};

class Authenticator {
 public:
  static constexpr uint32_t kAnyNode = 0xFFFFFFFF;

  // insecure: no tags are computed or checked (benchmarks only; the endpoint logs it loudly).
  // allow_aes_gcm false: this node neither sends nor accepts AES-256-GCM (tests of mixed
  // clusters); without AES-NI it cannot anyway. node: this node's id (keys of datagrams to
  // other receivers are not cached); kAnyNode caches every verified key (tests, tools).
  Authenticator(const ClusterKey& key, bool insecure, bool allow_aes_gcm = true,
                uint32_t node = kAnyNode);
  ~Authenticator();

  bool insecure() const { return insecure_; }
  bool aes_gcm() const { return aes_gcm_; }
  // Writes the tag of frame[0, len) at frame + len.
  void seal(uint8_t* frame, size_t len, const TagContext& context) const;
  // True when frame[len, len + 16) is the tag of frame[0, len).
  bool verify(const uint8_t* frame, size_t len, const TagContext& context) const;

  // Tagging a batch on several threads (transport/endpoint/tag_workers.h): the owning thread
  // looks up each datagram's key, then any thread may tag or check under it. A key stays valid
  // while cache_generation() is unchanged (the cache starts over after thousands of keys).
  struct Keys;
  // The key seal() would use for `context` (derived and cached here); null when insecure.
  const Keys* seal_key(const TagContext& context) const;
  // The cached key that checks `context`'s AEAD, or null: then verify() on the owning thread
  // (which derives it, and caches it only once a tag holds).
  const Keys* cached_key(const TagContext& context) const;
  uint64_t cache_generation() const;
  // seal() and verify() under a key from above; thread-safe.
  static void seal_with(const Keys& keys, uint8_t* frame, size_t len, const TagContext& context);
  static bool check_with(const Keys& keys, const uint8_t* frame, size_t len,
                         const TagContext& context);

 private:
  class KeyCache;
  // `context` as this node seals it: XChaCha20-Poly1305 where it has no AES-256-GCM.
  TagContext sealing(const TagContext& context) const;

  ClusterKey key_;
  bool insecure_;
  bool aes_gcm_;
  uint32_t node_;
  std::unique_ptr<KeyCache> cache_;
};

}  // namespace dtrain::transport
