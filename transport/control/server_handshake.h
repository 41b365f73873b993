#pragma once
// The server's side of the control handshake (control_handshake.h), run asynchronously on the
// control server's one I/O thread: a connection in its handshake costs a socket, a timer and a
// few hundred bytes, never a thread, whatever the other side does. It reads the client's hello
// (at most 38 + 255 bytes), looks up the key for the identity it claims, answers with its own
// hello and key proof (or with why it refuses), then reads the client's proof, which must be
// empty. At the deadline, or at the first wrong byte, the connection is closed.
//
// The outcome goes to `done` on the I/O thread: the authenticated connection, or nullptr and
// why it was refused.
#include <asio.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "transport/control/control_connection.h"
#include "transport/control/control_handshake.h"
#include "transport/control/control_identity.h"

namespace dtrain::transport {

class ServerHandshake : public std::enable_shared_from_this<ServerHandshake> {
 public:
  using Done = std::function<void(std::unique_ptr<ControlConnection>, const std::string& refusal)>;

  // Starts the handshake on `socket` (its executor runs every step).
  static std::shared_ptr<ServerHandshake> start(asio::ip::tcp::socket socket, std::string peer, const KeyLookup& lookup,
                    std::chrono::milliseconds timeout, Done done);
  // Closes the connection now (the server stops); `done` hears of it.
  void abort();

 private:
  ServerHandshake(asio::ip::tcp::socket socket, std::string peer, const KeyLookup& lookup,
                  Done done);
  using Step = void (ServerHandshake::*)();
  // Reads exactly n more bytes into in_ (from offset `at`), then runs `next`.
  void read(size_t at, size_t n, Step next);
  // Writes out_, then runs `next`.
  void write(Step next);
  void on_hello_start();
  void on_hello();
  void on_name();
  void read_proof();
  void on_proof_length();
  void on_proof();
  void refuse_version();
  void finish(const std::string& refusal);
  void fail(const std::string& why) { finish(why.empty() ? "closed" : why); }
  void closed_after_refusal() { finish(refusal_); }

  asio::ip::tcp::socket socket_;
  asio::steady_timer deadline_;
  std::string peer_;
  KeyLookup lookup_;
  Done done_;
  std::vector<uint8_t> in_, out_;
  ControlIdentity who_;
  handshake::FrameCipher cipher_;
  std::string refusal_;
  bool finished_ = false;
};

}  // namespace dtrain::transport
