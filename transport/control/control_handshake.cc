#include "transport/control/control_handshake.h"

#include <sodium.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "transport/control/control_error.h"

namespace dtrain::transport::handshake {
namespace {

static_assert(crypto_aead_chacha20poly1305_ietf_ABYTES == kTagBytes);

void frame_nonce(uint64_t counter,
                 unsigned char nonce[crypto_aead_chacha20poly1305_ietf_NPUBBYTES]) {
  std::memset(nonce, 0, crypto_aead_chacha20poly1305_ietf_NPUBBYTES);
  std::memcpy(nonce, &counter, sizeof counter);
}

}  // namespace

std::vector<uint8_t> make_hello(uint8_t verdict, const std::string& text) {
  if (sodium_init() < 0) std::abort();  // only fails without a usable random source
  const size_t n = std::min(text.size(), kMaxHelloText);
  std::vector<uint8_t> hello(kHelloBytes + n);
  std::memcpy(hello.data(), "DTC", 3);
  hello[3] = kControlVersion;
  randombytes_buf(hello.data() + 4, kNonceBytes);
  hello[kVerdictAt] = verdict;
  hello[kTextLengthAt] = static_cast<uint8_t>(n);
  std::memcpy(hello.data() + kHelloBytes, text.data(), n);
  return hello;
}

void check_hello_start(const uint8_t* hello, const std::string& peer) {
  using Kind = ControlError::Kind;
  if (std::memcmp(hello, "DTC", 3) != 0)
    throw ControlError(Kind::kMalformed, peer + " does not speak the dtrain control protocol",
                       "check that " + peer + " is a dtrain control port");
  if (hello[3] != kControlVersion)
    throw ControlError(Kind::kMalformed,
                       peer + " speaks control protocol version " + std::to_string(hello[3]) +
                           ", this program version " + std::to_string(kControlVersion),
                       "run the same dtrain release on every machine and every client");
}

FrameCipher::FrameCipher(const ClusterKey& key, const uint8_t* client_hello,
                         const uint8_t* server_hello, const ControlIdentity& client,
                         bool is_client) {
  std::vector<uint8_t> input{'D', 'T', 'C', static_cast<uint8_t>(client.role)};
  input.insert(input.end(), client_hello + 4, client_hello + 4 + kNonceBytes);
  input.insert(input.end(), server_hello + 4, server_hello + 4 + kNonceBytes);
  input.insert(input.end(), client.name.begin(), client.name.end());
  std::array<uint8_t, 64> derived{};
  crypto_generichash(derived.data(), derived.size(), input.data(), input.size(), key.data(),
                     key.size());
  std::memcpy((is_client ? send_key_ : receive_key_).data(), derived.data(), 32);
  std::memcpy((is_client ? receive_key_ : send_key_).data(), derived.data() + 32, 32);
  sodium_memzero(derived.data(), derived.size());
}

FrameCipher::~FrameCipher() {
  sodium_memzero(send_key_.data(), send_key_.size());
  sodium_memzero(receive_key_.data(), receive_key_.size());
}

// The body is encrypted (specs, logs and models cross the network); the tag covers it and the
// header, which is associated data (its length is read before the body arrives).
std::vector<uint8_t> FrameCipher::seal(const uint8_t* body, size_t size) {
  std::vector<uint8_t> frame(kFrameHeaderBytes + size + kTagBytes);
  const uint32_t len = static_cast<uint32_t>(size);
  std::memcpy(frame.data(), &len, kFrameHeaderBytes);
  if (size > 0) std::memcpy(frame.data() + kFrameHeaderBytes, body, size);
  unsigned char nonce[crypto_aead_chacha20poly1305_ietf_NPUBBYTES];
  frame_nonce(sent_++, nonce);
  unsigned long long tag_len = 0;
  uint8_t* text = frame.data() + kFrameHeaderBytes;  // encrypted in place
  crypto_aead_chacha20poly1305_ietf_encrypt_detached(text, text + size, &tag_len, text, size,
                                                     frame.data(), kFrameHeaderBytes, nullptr,
                                                     nonce, send_key_.data());
  return frame;
}

bool FrameCipher::open(uint8_t* frame, uint32_t len) {
  unsigned char nonce[crypto_aead_chacha20poly1305_ietf_NPUBBYTES];
  frame_nonce(received_++, nonce);
  uint8_t* text = frame + kFrameHeaderBytes;  // decrypted in place once it authenticates
  return crypto_aead_chacha20poly1305_ietf_decrypt_detached(
             text, nullptr, text, len, text + len, frame, kFrameHeaderBytes, nonce,
             receive_key_.data()) == 0;
}

}  // namespace dtrain::transport::handshake
