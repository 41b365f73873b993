#include "transport/control/control_connection.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <asio.hpp>
#include <atomic>
#include <cstring>
#include <optional>

#include "transport/security/client_credential.h"

namespace dtrain::transport {
namespace {

using asio::ip::tcp;
using Kind = ControlError::Kind;
using namespace handshake;

}  // namespace

struct ControlConnection::Io {
  asio::io_context io;
  tcp::socket socket{io};
  std::atomic<bool> closed{false};

  // Runs one asynchronous operation to completion or to the deadline; timed_out then.
  template <class Start>
  asio::error_code run(Millis timeout, Start&& start) {
    asio::error_code result = asio::error::would_block;
    start([&result](const asio::error_code& ec, auto&&...) { result = ec; });
    io.restart();
    io.run_for(timeout);
    if (result == asio::error::would_block) {
      asio::error_code ignored;
      socket.cancel(ignored);
      io.restart();
      io.run();  // lets the cancelled handler run
      return asio::error::timed_out;
    }
    return result;
  }
};

ControlConnection::ControlConnection(std::unique_ptr<Io> io) : io_(std::move(io)) {}

ControlConnection::~ControlConnection() {
  asio::error_code ignored;
  io_->socket.close(ignored);
}

std::unique_ptr<ControlConnection> ControlConnection::connect(const std::string& host,
                                                              uint16_t port,
                                                              const ClusterKey& key,
                                                              Millis timeout) {
  return connect(host, port, ControlCredential::daemon(key), timeout);
}

std::unique_ptr<ControlConnection> ControlConnection::connect(const std::string& host,
                                                              uint16_t port,
                                                              const ControlCredential& credential,
                                                              Millis timeout) {
  const std::string where = host + ":" + std::to_string(port);
  const std::string fix = "start the controller (dtraind with role controller) on " + where +
                          ", or point --controller at it";
  auto io = std::make_unique<Io>();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto left = [&] {
    return std::max(Millis(1), std::chrono::duration_cast<Millis>(
                                   deadline - std::chrono::steady_clock::now()));
  };
  tcp::resolver resolver(io->io);
  tcp::resolver::results_type endpoints;
  asio::error_code ec = io->run(left(), [&](auto handler) {
    resolver.async_resolve(host, std::to_string(port),
                           [&, handler](const asio::error_code& e, tcp::resolver::results_type r) {
                             endpoints = std::move(r);
                             handler(e);
                           });
  });
  if (ec) {
    resolver.cancel();
    throw ControlError(Kind::kUnreachable, "cannot resolve '" + host + "': " + ec.message(), fix);
  }
  ec = io->run(left(), [&](auto handler) {
    asio::async_connect(io->socket, endpoints,
                        [handler](const asio::error_code& e, const tcp::endpoint&) { handler(e); });
  });
  if (ec)
    throw ControlError(Kind::kUnreachable,
                       "cannot connect to the controller at " + where + ": " +
                           (ec == asio::error::timed_out
                                ? "no answer within " + std::to_string(timeout.count()) + " ms"
                                : ec.message()),
                       fix);
  io->socket.set_option(tcp::no_delay(true));
  std::unique_ptr<ControlConnection> c(new ControlConnection(std::move(io)));
  c->peer_ = where;
  c->client_handshake(credential, left());
  return c;
}

std::unique_ptr<ControlConnection> ControlConnection::adopt(int socket_fd, std::string peer,
                                                            ControlIdentity who,
                                                            FrameCipher cipher) {
  auto io = std::make_unique<Io>();
  asio::error_code ec;
  sockaddr_storage local{};
  socklen_t local_len = sizeof local;
  getsockname(socket_fd, reinterpret_cast<sockaddr*>(&local), &local_len);
  io->socket.assign(local.ss_family == AF_INET6 ? tcp::v6() : tcp::v4(), socket_fd, ec);
  if (ec) {
    ::close(socket_fd);
    throw ControlError(Kind::kClosed, "cannot take over an accepted socket: " + ec.message(),
                       "this is a bug; please report it");
  }
  std::unique_ptr<ControlConnection> c(new ControlConnection(std::move(io)));
  c->peer_ = std::move(peer);
  c->peer_identity_ = std::move(who);
  c->cipher_ = std::move(cipher);
  return c;
}

// Reads or writes exactly `n` bytes of the handshake before `deadline`; a timeout or a closed
// connection is reported as the handshake's failure.
void ControlConnection::handshake_io(bool write, uint8_t* data, size_t n,
                                     std::chrono::steady_clock::time_point deadline) {
  const auto left = std::max(Millis(1), std::chrono::duration_cast<Millis>(
                                            deadline - std::chrono::steady_clock::now()));
  const asio::error_code ec = io_->run(left, [&](auto handler) {
    if (write)
      asio::async_write(io_->socket, asio::buffer(data, n), handler);
    else
      asio::async_read(io_->socket, asio::buffer(data, n), handler);
  });
  const std::string check = "check that " + peer_ + " is a dtrain control port";
  if (ec == asio::error::timed_out)
    throw ControlError(Kind::kTimeout, peer_ + " did not complete the control handshake in time",
                       check);
  if (ec)
    throw ControlError(Kind::kClosed, peer_ + " closed the connection during the handshake: " +
                                          ec.message(),
                       check);
}

void ControlConnection::client_handshake(const ControlCredential& credential, Millis timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<uint8_t> ours =
      make_hello(static_cast<uint8_t>(credential.identity.role), credential.identity.name);
  handshake_io(true, ours.data(), ours.size(), deadline);
  std::array<uint8_t, kHelloBytes> theirs{};
  handshake_io(false, theirs.data(), 4, deadline);
  check_hello_start(theirs.data(), peer_);
  handshake_io(false, theirs.data() + 4, kHelloBytes - 4, deadline);
  if (theirs[kVerdictAt] != 0) {
    std::string why(theirs[kTextLengthAt], '\0');
    handshake_io(false, reinterpret_cast<uint8_t*>(why.data()), why.size(), deadline);
    throw ControlError(Kind::kAuthentication,
                       peer_ + " refused " + credential.identity.describe() + ": " + why,
                       credential.identity.role == ControlIdentity::Role::kClient
                           ? "ask the cluster's operator to list your credential (its .cred file "
                             "in the controller's clients_dir, then SIGHUP), or use another"
                           : kKeyFix);
  }
  peer_identity_ = {ControlIdentity::Role::kDaemon, ""};
  cipher_ = FrameCipher(credential.key, ours.data(), theirs.data(), credential.identity, true);
  prove_key(timeout, credential.identity);
}

// Each side proves it holds the key with an empty authenticated frame (the server's side:
// ServerHandshake). The proof must be empty: a peer that has not proven the key gets no
// allocation on its say-so.
void ControlConnection::prove_key(Millis timeout, const ControlIdentity& client) {
  send({}, timeout);
  try {
    receive_at_most(timeout, 0);
  } catch (const ControlError& e) {
    if (e.kind() != Kind::kAuthentication && e.kind() != Kind::kClosed) throw;
    const bool daemon = client.role == ControlIdentity::Role::kDaemon;
    throw ControlError(Kind::kAuthentication,
                       peer_ + " (the controller)" +
                           (daemon ? " does not use this cluster key"
                                   : " does not hold the key of " + client.describe()),
                       daemon ? std::string(kKeyFix)
                              : "use the credential file made for " + client.describe() +
                                    " (the controller's copy and yours must match)");
  }
}

void ControlConnection::send(const std::vector<uint8_t>& body, Millis timeout) {
  if (io_->closed) throw ControlError(Kind::kClosed, "connection to " + peer_ + " closed", "reconnect");
  if (body.size() > kMaxFrameBytes)
    throw ControlError(Kind::kMalformed,
                       "control frame of " + std::to_string(body.size()) + " bytes exceeds " +
                           std::to_string(kMaxFrameBytes),
                       "send large data over the data channel");
  const std::vector<uint8_t> frame = cipher_.seal(body.data(), body.size());
  const asio::error_code ec = io_->run(timeout, [&](auto handler) {
    asio::async_write(io_->socket, asio::buffer(frame), handler);
  });
  if (ec == asio::error::timed_out)
    throw ControlError(Kind::kTimeout,
                       peer_ + " did not take a control frame within " +
                           std::to_string(timeout.count()) + " ms",
                       "check that " + peer_ + " is running and not overloaded");
  if (ec) throw ControlError(Kind::kClosed, "connection to " + peer_ + " lost: " + ec.message(), "reconnect");
}

std::vector<uint8_t> ControlConnection::receive(Millis timeout) {
  return receive_at_most(timeout, kMaxFrameBytes);
}

std::vector<uint8_t> ControlConnection::receive_at_most(Millis timeout, uint32_t max_bytes) {
  if (io_->closed) throw ControlError(Kind::kClosed, "connection to " + peer_ + " closed", "reconnect");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto read = [&](uint8_t* data, size_t n) {
    const auto left = std::max(Millis(1), std::chrono::duration_cast<Millis>(
                                              deadline - std::chrono::steady_clock::now()));
    const asio::error_code ec = io_->run(left, [&](auto handler) {
      asio::async_read(io_->socket, asio::buffer(data, n), handler);
    });
    if (ec == asio::error::timed_out)
      throw ControlError(Kind::kTimeout,
                         "no control frame from " + peer_ + " within " +
                             std::to_string(timeout.count()) + " ms",
                         "check that " + peer_ + " is running and not overloaded");
    if (ec == asio::error::eof || io_->closed)
      throw ControlError(Kind::kClosed, peer_ + " closed the connection", "reconnect");
    if (ec) throw ControlError(Kind::kClosed, "connection to " + peer_ + " lost: " + ec.message(), "reconnect");
  };
  uint32_t len = 0;
  read(reinterpret_cast<uint8_t*>(&len), 4);
  if (len > max_bytes) {
    close();
    throw ControlError(Kind::kMalformed,
                       peer_ + " announced a control frame of " + std::to_string(len) +
                           " bytes (the limit is " + std::to_string(max_bytes) +
                           (max_bytes == 0 ? ", the key proof is empty)" : ")"),
                       "check that " + peer_ + " runs dtrain");
  }
  // The frame grows as its bytes arrive: an announced length is a claim, and a peer that
  // announces the most and sends nothing holds one piece, not the frame.
  constexpr size_t kPiece = size_t(64) << 10;
  const size_t whole = kFrameHeaderBytes + size_t(len) + kTagBytes;
  std::vector<uint8_t> frame(std::min(whole, kFrameHeaderBytes + kPiece));
  std::memcpy(frame.data(), &len, kFrameHeaderBytes);
  for (size_t at = kFrameHeaderBytes; at < whole;) {
    if (frame.size() < std::min(whole, at + kPiece)) frame.resize(std::min(whole, at + kPiece));
    read(frame.data() + at, frame.size() - at);
    at = frame.size();
  }
  if (!cipher_.open(frame.data(), len)) {
    close();
    throw ControlError(Kind::kAuthentication,
                       "a control frame from " + peer_ +
                           " failed authentication (forged, replayed, or another key)",
                       kKeyFix);
  }
  return std::vector<uint8_t>(frame.begin() + 4, frame.begin() + 4 + len);
}

bool ControlConnection::wait_readable(Millis timeout) {
  if (io_->closed) return true;  // the next receive reports it
  pollfd p{io_->socket.native_handle(), POLLIN, 0};
  return ::poll(&p, 1, static_cast<int>(timeout.count())) != 0;
}

int ControlConnection::native_handle_for_tests() const { return io_->socket.native_handle(); }

void ControlConnection::close() {
  io_->closed = true;
  ::shutdown(io_->socket.native_handle(), SHUT_RDWR);  // a plain syscall: safe from any thread
}

}  // namespace dtrain::transport
