#pragma once
// One authenticated TCP control connection (docs/architecture/transport.md, "The control channel"):
// length-prefixed frames, each with a 16-byte Poly1305 tag under a key for this connection and
// direction, derived from the cluster key and a fresh random nonce from each side. Frames are
// counted per direction and the count is part of the tag's nonce, so a replayed, dropped, reordered
// or altered frame fails its tag; a recorded connection cannot be replayed either (the other side's
// nonce differs).
//
// The handshake (control_handshake.h): the client sends its hello, naming its role (daemon, or
// client with its name); the server looks up the key that proves that identity (the cluster
// key for daemons, the client's credential for a client) and answers with its own hello, or
// with why it refuses (an unknown or revoked client). Then each side sends an empty frame
// authenticated with keys derived from that key, both nonces and the identity: a side that
// does not hold the key fails the other's tag at once, so a wrong key is reported by name on
// both ends before any request is read. The client side runs here (connect); the server side
// runs asynchronously in ServerHandshake, which hands the connection over (adopt).
//
// Every call has a deadline; nothing blocks forever. One thread uses a connection at a time,
// except close(), which any thread may call to unblock it.
#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/control/control_error.h"
#include "transport/control/control_handshake.h"
#include "transport/control/control_identity.h"
#include "transport/security/cluster_key.h"

namespace dtrain::transport {

class ControlConnection {
 public:
  using Millis = std::chrono::milliseconds;
  // A frame larger than this is refused (job specs, results and logs are far smaller;
  // parameters travel on the data channel).
  static constexpr uint32_t kMaxFrameBytes = 64u << 20;
  static constexpr Millis kDefaultTimeout{10000};

  // Connects to host:port and authenticates. Throws ControlError: kUnreachable (refused, no
  // such host, or no answer within `timeout`), kAuthentication (different key), kTimeout.
  // kAuthentication also when the server refuses the credential (with its reason).
  static std::unique_ptr<ControlConnection> connect(const std::string& host, uint16_t port,
                                                    const ControlCredential& credential,
                                                    Millis timeout = kDefaultTimeout);
  // As a daemon, with the cluster key.
  static std::unique_ptr<ControlConnection> connect(const std::string& host, uint16_t port,
                                                    const ClusterKey& key,
                                                    Millis timeout = kDefaultTimeout);
  // Takes over a socket whose handshake the server completed (ServerHandshake): `cipher` holds
  // the connection's keys and the frame counts so far.
  static std::unique_ptr<ControlConnection> adopt(int socket_fd, std::string peer,
                                                  ControlIdentity who,
                                                  handshake::FrameCipher cipher);
  ~ControlConnection();
  ControlConnection(const ControlConnection&) = delete;
  ControlConnection& operator=(const ControlConnection&) = delete;

  void send(const std::vector<uint8_t>& body, Millis timeout = kDefaultTimeout);
  // The next frame's body. Throws ControlError: kClosed, kTimeout, kAuthentication (a tag that
  // does not verify), kMalformed (oversized).
  std::vector<uint8_t> receive(Millis timeout = kDefaultTimeout);
  // receive() with a smaller bound on the announced length, checked before anything is
  // allocated (0 for the handshake's proof; a client session's first frame); a frame over it
  // closes the connection (kMalformed).
  std::vector<uint8_t> receive_at_most(Millis timeout, uint32_t max_bytes);
  // True when a frame (or the connection's end) is ready to read within `timeout`: lets one
  // thread both serve a connection and send on it without a receive timing out mid-frame.
  bool wait_readable(Millis timeout);
  // Unblocks a send or receive in progress on another thread; later calls throw kClosed.
  void close();
  // "address:port" of the other side.
  const std::string& peer() const { return peer_; }
  // Who the other side proved to be (on a client: the daemon it reached).
  const ControlIdentity& peer_identity() const { return peer_identity_; }
  // The socket: for tests that play a hostile client writing raw bytes after the handshake.
  int native_handle_for_tests() const;

 private:
  struct Io;
  explicit ControlConnection(std::unique_ptr<Io> io);
  void client_handshake(const ControlCredential& credential, Millis timeout);
  // Reads or writes exactly n bytes of the handshake before `deadline`.
  void handshake_io(bool write, uint8_t* data, size_t n,
                    std::chrono::steady_clock::time_point deadline);
  void prove_key(Millis timeout, const ControlIdentity& client);

  std::unique_ptr<Io> io_;
  std::string peer_;
  ControlIdentity peer_identity_;
  handshake::FrameCipher cipher_;
};

}  // namespace dtrain::transport
