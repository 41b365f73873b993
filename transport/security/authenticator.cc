#include "transport/security/authenticator.h"

#include <sodium.h>

#include <cstdlib>
#include <cstring>
#include <unordered_map>

namespace dtrain::transport {
namespace {

// Beyond this many (sender, receiver, boot) keys the cache starts over: a node holds one per
// peer and direction and boot it actually heard from or sent to, far fewer than this.
constexpr size_t kMaxCachedKeys = 4096;
// BLAKE2b personalisation of the AES-256-GCM key: keeps it apart from every other use of the
// cluster key.
constexpr unsigned char kGcmPersonal[crypto_generichash_blake2b_PERSONALBYTES] = {
    'd', 't', 'r', 'a', 'i', 'n', '-', 'd', 'a', 't', 'a', '-', 'g', 'c', 'm', 0};

void put_le(unsigned char* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

// The 16 bytes fixed for one direction of a link and one boot: XChaCha20's HChaCha20 input
// and the AES key's salt.
void link_input(unsigned char in[16], const TagContext& c) {
  put_le(in, c.sender, 4);
  put_le(in + 4, c.receiver, 4);
  put_le(in + 8, c.boot_id, 8);
}

// Both AEADs take a 12-byte nonce under the derived key: four zero bytes, then the counter.
void counter_nonce(unsigned char nonce[12], uint64_t counter) {
  std::memset(nonce, 0, 4);
  put_le(nonce + 4, counter, 8);
}

}  // namespace

const char* aead_name(Aead aead) {
  return aead == Aead::kAes256Gcm ? "aes256gcm" : "xchacha20poly1305";
}

struct Authenticator::Keys {
  crypto_aead_aes256gcm_state aes;  // expanded key and GHASH powers
  unsigned char chacha[crypto_aead_chacha20poly1305_ietf_KEYBYTES];
  bool has_aes = false, has_chacha = false;

  bool has(Aead aead) const { return aead == Aead::kAes256Gcm ? has_aes : has_chacha; }
  // Takes `aead`'s key from `other` (which has it), keeping the other AEAD's.
  void take(const Keys& other, Aead aead) {
    if (aead == Aead::kAes256Gcm) {
      aes = other.aes;
      has_aes = true;
    } else {
      std::memcpy(chacha, other.chacha, sizeof chacha);
      has_chacha = true;
    }
  }

  ~Keys() { sodium_memzero(this, sizeof *this); }
};

class Authenticator::KeyCache {
 public:
  struct Id {
    uint32_t sender, receiver;
    uint64_t boot;
    bool operator==(const Id& o) const {
      return sender == o.sender && receiver == o.receiver && boot == o.boot;
    }
  };
  struct IdHash {
    size_t operator()(const Id& id) const {
      return std::hash<uint64_t>()(id.boot ^ (uint64_t(id.sender) << 32 | id.receiver));
    }
  };

  Keys* find(const Id& id) {
    auto it = keys_.find(id);
    return it == keys_.end() ? nullptr : &it->second;
  }
  Keys& insert(const Id& id) {
    if (keys_.size() >= kMaxCachedKeys) {
      keys_.clear();
      ++generation_;
    }
    return keys_[id];
  }
  uint64_t generation() const { return generation_; }

 private:
  std::unordered_map<Id, Keys, IdHash> keys_;
  uint64_t generation_ = 0;  // bumped when the keys start over (pointers to them are stale)
};

Authenticator::Authenticator(const ClusterKey& key, bool insecure, bool allow_aes_gcm,
                             uint32_t node)
    : key_(key), insecure_(insecure), node_(node), cache_(std::make_unique<KeyCache>()) {
  static_assert(crypto_aead_chacha20poly1305_ietf_ABYTES == kTagBytes);
  static_assert(crypto_aead_aes256gcm_ABYTES == kTagBytes);
  if (sodium_init() < 0) std::abort();  // only fails without a usable random source
  aes_gcm_ = allow_aes_gcm && !insecure && crypto_aead_aes256gcm_is_available() == 1;
}

Authenticator::~Authenticator() = default;

namespace {

// Derives what `aead` needs into `k` (unless it is there already).
template <typename Keys>
void derive(Keys& k, const ClusterKey& key, const TagContext& c) {
  if (k.has(c.aead)) return;  // every seal: keep it cheap
  unsigned char in[16];
  link_input(in, c);
  if (c.aead == Aead::kAes256Gcm) {
    unsigned char aes_key[crypto_aead_aes256gcm_KEYBYTES];
    crypto_generichash_blake2b_salt_personal(aes_key, sizeof aes_key, nullptr, 0, key.data(),
                                             key.size(), in, kGcmPersonal);
    crypto_aead_aes256gcm_beforenm(&k.aes, aes_key);
    sodium_memzero(aes_key, sizeof aes_key);
    k.has_aes = true;
  } else {
    crypto_core_hchacha20(k.chacha, in, key.data(), nullptr);
    k.has_chacha = true;
  }
}

// The AEAD is the context's; derive() made its key (abort rather than tag under a zero key).
template <typename Keys>
void require_key(const Keys& k, Aead aead) {
  if (!k.has(aead)) std::abort();
}

template <typename Keys>
void tag(const Keys& k, Aead aead, const uint8_t* frame, size_t len, uint64_t counter,
         uint8_t* out) {
  require_key(k, aead);
  unsigned char nonce[12];
  counter_nonce(nonce, counter);
  unsigned char none[1] = {0};  // nothing is encrypted; the frame is associated data
  unsigned long long tag_len = 0;
  if (aead == Aead::kAes256Gcm)
    crypto_aead_aes256gcm_encrypt_detached_afternm(none, out, &tag_len, none, 0, frame, len,
                                                   nullptr, nonce, &k.aes);
  else
    crypto_aead_chacha20poly1305_ietf_encrypt_detached(none, out, &tag_len, none, 0, frame, len,
                                                       nullptr, nonce, k.chacha);
}

template <typename Keys>
bool check(const Keys& k, Aead aead, const uint8_t* frame, size_t len, uint64_t counter) {
  require_key(k, aead);
  unsigned char nonce[12];
  counter_nonce(nonce, counter);
  unsigned char none[1] = {0};
  if (aead == Aead::kAes256Gcm)
    return crypto_aead_aes256gcm_decrypt_detached_afternm(none, nullptr, none, 0, frame + len,
                                                          frame, len, nonce, &k.aes) == 0;
  return crypto_aead_chacha20poly1305_ietf_decrypt_detached(none, nullptr, none, 0, frame + len,
                                                            frame, len, nonce, k.chacha) == 0;
}

}  // namespace

void Authenticator::seal(uint8_t* frame, size_t len, const TagContext& c) const {
  if (insecure_) {
    std::memset(frame + len, 0, kTagBytes);
    return;
  }
  const TagContext ctx = sealing(c);
  seal_with(*seal_key(ctx), frame, len, ctx);
}

TagContext Authenticator::sealing(const TagContext& c) const {
  TagContext ctx = c;
  if (!aes_gcm_) ctx.aead = Aead::kXChaCha20Poly1305;  // seal_datagram's flag says the same
  return ctx;
}

const Authenticator::Keys* Authenticator::seal_key(const TagContext& c) const {
  if (insecure_) return nullptr;
  const TagContext ctx = sealing(c);
  const KeyCache::Id id{ctx.sender, ctx.receiver, ctx.boot_id};
  Keys* k = cache_->find(id);
  if (!k) k = &cache_->insert(id);
  // An entry gains the other AEAD's key beside the first (a link switches to AES-256-GCM when
  // the peer's heartbeat arrives) and never loses one: a batch being sealed on other threads
  // may still hold datagrams under the first.
  derive(*k, key_, ctx);
  return k;
}

const Authenticator::Keys* Authenticator::cached_key(const TagContext& c) const {
  if (insecure_ || (c.aead == Aead::kAes256Gcm && !aes_gcm_)) return nullptr;
  const Keys* k = cache_->find({c.sender, c.receiver, c.boot_id});
  if (!k || !k->has(c.aead)) return nullptr;
  return k;
}

uint64_t Authenticator::cache_generation() const { return cache_->generation(); }

void Authenticator::seal_with(const Keys& keys, uint8_t* frame, size_t len, const TagContext& c) {
  tag(keys, c.aead, frame, len, c.counter, frame + len);
}

bool Authenticator::check_with(const Keys& keys, const uint8_t* frame, size_t len,
                               const TagContext& c) {
  return check(keys, c.aead, frame, len, c.counter);
}

bool Authenticator::verify(const uint8_t* frame, size_t len, const TagContext& c) const {
  if (insecure_) return true;
  if (c.aead == Aead::kAes256Gcm && !aes_gcm_) return false;  // cannot check it: refuse
  const KeyCache::Id id{c.sender, c.receiver, c.boot_id};
  Keys* cached = cache_->find(id);
  if (cached && cached->has(c.aead)) return check_with(*cached, frame, len, c);
  // Not cached (or not this AEAD's key yet: the first datagram after a link's switch): derive
  // aside, and keep it only once the tag holds and only for datagrams addressed here.
  Keys fresh;
  derive(fresh, key_, c);
  if (!check(fresh, c.aead, frame, len, c.counter)) return false;
  if (node_ != kAnyNode && c.receiver != node_) return true;  // the endpoint refuses it next
  Keys& kept = cached ? *cached : cache_->insert(id);
  kept.take(fresh, c.aead);
  return true;
}

}  // namespace dtrain::transport
