// libFuzzer target for the control channel, as a hostile client meets it:
//   first byte even: the bytes arrive on a connection the server accepts (the hello, the
//     identity, the key-proof frame's length), which must refuse or close, never crash;
//   first byte odd: the rest is the body of an authenticated frame (a daemon's bug or a
//     newer release), read by the verifier and by every reader of a control body.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "daemon/protocol/control_messages.h"
#include "transport/control/control_connection.h"
#include "daemon/protocol/control_frames.h"
#include "transport/control/server_handshake.h"
#include "tests/fuzz/two_targets.h"

using namespace dtrain;

namespace {

void handshake(const uint8_t* data, size_t size) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return;
  // The server's own hello is small; the socket's buffers hold both directions.
  size_t sent = 0;
  while (sent < size) {
    const ssize_t n = write(fds[1], data + sent, size - sent);
    if (n <= 0) break;
    sent += size_t(n);
  }
  shutdown(fds[1], SHUT_WR);
  transport::ClusterKey key{};
  // A daemon key, and one listed client: both identities' paths are reachable.
  const transport::KeyLookup lookup = [&](const transport::ControlIdentity& who,
                                          std::string& refusal) {
    if (who.role == transport::ControlIdentity::Role::kDaemon || who.name == "alice")
      return std::optional<transport::ClusterKey>(key);
    refusal = "unknown client";
    return std::optional<transport::ClusterKey>();
  };
  // The server's asynchronous handshake on its own I/O context: refused or closed is what must
  // happen to bytes that do not hold the key; it ends when the bytes do, or at the deadline.
  asio::io_context io;
  asio::ip::tcp::socket socket(io);
  asio::error_code ec;
  socket.assign(asio::ip::tcp::v4(), fds[0], ec);
  if (ec) {
    close(fds[0]);
    close(fds[1]);
    return;
  }
  transport::ServerHandshake::start(std::move(socket), "fuzzer", lookup,
                                    std::chrono::milliseconds(20),
                                    [](std::unique_ptr<transport::ControlConnection>,
                                       const std::string&) {});
  io.run();
  close(fds[1]);
}

void frame_body(const uint8_t* data, size_t size) {
  const std::vector<uint8_t> body(data, data + size);
  std::vector<uint8_t> body_copy;
  try {
    const daemon::control::ControlFrame& f = daemon::read_control_frame(body);
    if (const auto* r = f.body_as_Register()) {
      daemon::NodeRegistration node;
      daemon::read_registration(*r, node);
    }
    if (const auto* q = f.body_as_Request()) {
      daemon::ClientRequest request;
      daemon::read_request(*q, body.size(), request);
    }
    if (const auto* d = f.body_as_RequestData(); d && d->data())  // as the controller takes it
      std::vector<uint8_t>(d->data()->begin(), d->data()->end()).swap(body_copy);
  } catch (const transport::ControlError&) {
  }
  daemon::JobMessageIn job;
  daemon::read_job_message(body, job);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz::two_targets(data, size, handshake, frame_body);
}
