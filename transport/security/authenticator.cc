#include "transport/security/authenticator.h"

#include <sodium.h>

#include <cstdlib>
#include <cstring>

namespace dtrain::transport {
namespace {

void make_nonce(unsigned char nonce[crypto_aead_xchacha20poly1305_ietf_NPUBBYTES],
                uint32_t sender, uint64_t boot_id, uint64_t counter) {
  std::memset(nonce, 0, crypto_aead_xchacha20poly1305_ietf_NPUBBYTES);
  std::memcpy(nonce, &sender, 4);
  std::memcpy(nonce + 4, &boot_id, 8);
  std::memcpy(nonce + 12, &counter, 8);
}

}  // namespace

Authenticator::Authenticator(const ClusterKey& key, bool insecure)
    : key_(key), insecure_(insecure) {
  static_assert(crypto_aead_xchacha20poly1305_ietf_ABYTES == kTagBytes);
  if (sodium_init() < 0) std::abort();  // only fails without a usable random source
}

void Authenticator::seal(uint8_t* frame, size_t len, uint32_t sender, uint64_t boot_id,
                         uint64_t counter) const {
  if (insecure_) {
    std::memset(frame + len, 0, kTagBytes);
    return;
  }
  unsigned char nonce[crypto_aead_xchacha20poly1305_ietf_NPUBBYTES];
  make_nonce(nonce, sender, boot_id, counter);
  unsigned long long tag_len = 0;
  unsigned char no_ciphertext[1] = {0};  // nothing is encrypted; the frame is associated data
  crypto_aead_xchacha20poly1305_ietf_encrypt_detached(no_ciphertext, frame + len, &tag_len,
                                                      no_ciphertext, 0, frame, len, nullptr,
                                                      nonce, key_.data());
}

bool Authenticator::verify(const uint8_t* frame, size_t len, uint32_t sender, uint64_t boot_id,
                           uint64_t counter) const {
  if (insecure_) return true;
  unsigned char nonce[crypto_aead_xchacha20poly1305_ietf_NPUBBYTES];
  make_nonce(nonce, sender, boot_id, counter);
  unsigned char no_plaintext[1] = {0};
  return crypto_aead_xchacha20poly1305_ietf_decrypt_detached(no_plaintext, nullptr, no_plaintext,
                                                             0, frame + len, frame, len, nonce,
                                                             key_.data()) == 0;
}

}  // namespace dtrain::transport
