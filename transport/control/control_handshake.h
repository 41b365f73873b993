#pragma once
// The bytes of the control handshake and of every frame after it (docs/architecture/transport.md,
// "The control channel"), shared by the two sides: the blocking client (ControlConnection::connect)
// and the asynchronous server (ServerHandshake). Nothing here does I/O.
//
//   hello:  "DTC" | version | 32 random bytes | role or verdict | length | name or refusal
//   frame:  length (u32) | body | 16-byte tag (ChaCha20-Poly1305, nonce = frame count)
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "transport/control/control_identity.h"
#include "transport/security/cluster_key.h"

namespace dtrain::transport {

// The control protocol's version (2: identities in the hello; 3: typed job start and rejoin
// messages; 4: request kinds are an enum; 5: every node report is a typed table; 7: a job
// spec without training.sync means `auto`, so a node of 6 would read the same start message
// as bsp; 8: frame bodies are encrypted, not only authenticated; 9: a client's first frame is
// small, and a task's model follows it in a frame of its own). Both ends must speak the same.
constexpr uint8_t kControlVersion = 9;

namespace handshake {

constexpr size_t kNonceBytes = 32;
// "DTC", version, nonce, then the client's role or the server's verdict (0: go on, 1: refused),
// and the length of what follows: the client's name, or why the server refused.
constexpr size_t kHelloBytes = 4 + kNonceBytes + 2;
constexpr size_t kVerdictAt = 4 + kNonceBytes;  // the role (client) or the verdict (server)
constexpr size_t kTextLengthAt = kVerdictAt + 1;
constexpr size_t kMaxHelloText = 255;
constexpr size_t kTagBytes = 16;
constexpr size_t kFrameHeaderBytes = 4;  // the body's length
constexpr char kKeyFix[] =
    "use the cluster's key file (the one every dtraind of this cluster reads; pass it with "
    "--key-file), or make a new one with `dtraind keygen` and copy it to every machine";

// A hello with fresh random bytes: `verdict` is the client's role or the server's verdict, and
// `text` (cut at 255 bytes) the client's name or the server's refusal.
std::vector<uint8_t> make_hello(uint8_t verdict, const std::string& text);
// Throws ControlError (kMalformed) unless the first 4 bytes are "DTC" and this version.
void check_hello_start(const uint8_t* hello, const std::string& peer);

// One connection's frame keys and counts (one per direction, each part of the tag's nonce, so
// a replayed, dropped, reordered or altered frame fails its tag).
class FrameCipher {
 public:
  FrameCipher() = default;
  // Derived with BLAKE2b keyed with `key` (the cluster key, or the client's) over both nonces
  // (the client's first) and the client's role and name; the client sends with the first
  // half, the server with the second.
  FrameCipher(const ClusterKey& key, const uint8_t* client_hello, const uint8_t* server_hello,
              const ControlIdentity& client, bool is_client);
  FrameCipher(FrameCipher&&) noexcept = default;
  FrameCipher& operator=(FrameCipher&&) noexcept = default;
  ~FrameCipher();

  // The next outgoing frame: header, the body encrypted, tag (ChaCha20-Poly1305, the header
  // as associated data).
  std::vector<uint8_t> seal(const uint8_t* body, size_t size);
  // Checks the next incoming frame (header, `len` body bytes, tag) and decrypts its body in
  // place; false (the body unusable) when it does not authenticate.
  bool open(uint8_t* frame, uint32_t len);

 private:
  std::array<uint8_t, 32> send_key_{}, receive_key_{};
  uint64_t sent_ = 0, received_ = 0;
};

}  // namespace handshake
}  // namespace dtrain::transport
