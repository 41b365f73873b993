#include "transport/control/control_connection.h"

#include <sodium.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <asio.hpp>
#include <atomic>
#include <cstring>

namespace dtrain::transport {
namespace {

using asio::ip::tcp;
using Kind = ControlError::Kind;

constexpr uint8_t kVersion = 1;
constexpr size_t kNonceBytes = 32;
constexpr size_t kHelloBytes = 4 + kNonceBytes;  // "DTC", version, nonce
constexpr size_t kTag = crypto_aead_chacha20poly1305_ietf_ABYTES;
constexpr char kKeyFix[] =
    "use the cluster's key file (the one every dtraind of this cluster reads; pass it with "
    "--key-file), or make a new one with `dtraind keygen` and copy it to every machine";

void frame_nonce(uint64_t counter, unsigned char nonce[crypto_aead_chacha20poly1305_ietf_NPUBBYTES]) {
  std::memset(nonce, 0, crypto_aead_chacha20poly1305_ietf_NPUBBYTES);
  std::memcpy(nonce, &counter, sizeof counter);
}

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
  c->send_key_ = key;  // the cluster key, until the handshake derives this connection's keys
  c->handshake(/*is_client=*/true, left());
  return c;
}

std::unique_ptr<ControlConnection> ControlConnection::accept(int socket_fd, const ClusterKey& key,
                                                             Millis timeout) {
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
  io->socket.set_option(tcp::no_delay(true), ec);
  std::unique_ptr<ControlConnection> c(new ControlConnection(std::move(io)));
  const auto remote = c->io_->socket.remote_endpoint(ec);
  c->peer_ = ec ? "?" : remote.address().to_string() + ":" + std::to_string(remote.port());
  c->send_key_ = key;
  c->handshake(/*is_client=*/false, timeout);
  return c;
}

void ControlConnection::handshake(bool is_client, Millis timeout) {
  const ClusterKey key = send_key_;
  std::array<uint8_t, kHelloBytes> ours{'D', 'T', 'C', kVersion}, theirs{};
  randombytes_buf(ours.data() + 4, kNonceBytes);
  asio::error_code ec = io_->run(timeout, [&](auto handler) {
    asio::async_write(io_->socket, asio::buffer(ours), handler);
  });
  if (!ec)
    ec = io_->run(timeout, [&](auto handler) {
      asio::async_read(io_->socket, asio::buffer(theirs), handler);
    });
  const std::string check = is_client ? "check that " + peer_ + " is a dtrain control port"
                                      : "nothing to do unless it recurs: then find what on " +
                                            peer_ + " connects to this port";
  if (ec == asio::error::timed_out)
    throw ControlError(Kind::kTimeout,
                       peer_ + " did not complete the control handshake within " +
                           std::to_string(timeout.count()) + " ms",
                       check);
  if (ec)
    throw ControlError(Kind::kClosed, peer_ + " closed the connection during the handshake: " +
                                          ec.message(),
                       check);
  if (std::memcmp(theirs.data(), "DTC", 3) != 0)
    throw ControlError(Kind::kMalformed, peer_ + " does not speak the dtrain control protocol",
                       check);
  if (theirs[3] != kVersion)
    throw ControlError(Kind::kMalformed,
                       peer_ + " speaks control protocol version " + std::to_string(theirs[3]) +
                           ", this program version " + std::to_string(kVersion),
                       "run the same dtrain release on every machine");
  // Keys for this connection: BLAKE2b keyed with the cluster key over both nonces (client's
  // first); the first half protects client -> server, the second server -> client.
  std::array<uint8_t, 3 + 2 * kNonceBytes> input{'D', 'T', 'C'};
  const auto& client = is_client ? ours : theirs;
  const auto& server = is_client ? theirs : ours;
  std::memcpy(input.data() + 3, client.data() + 4, kNonceBytes);
  std::memcpy(input.data() + 3 + kNonceBytes, server.data() + 4, kNonceBytes);
  std::array<uint8_t, 64> derived{};
  crypto_generichash(derived.data(), derived.size(), input.data(), input.size(), key.data(),
                     key.size());
  std::memcpy((is_client ? send_key_ : receive_key_).data(), derived.data(), 32);
  std::memcpy((is_client ? receive_key_ : send_key_).data(), derived.data() + 32, 32);
  sodium_memzero(derived.data(), derived.size());
  // Each side proves it holds the key with an empty authenticated frame. The proof must be
  // empty: a peer that has not proven the key gets no allocation on its say-so.
  send({}, timeout);
  try {
    receive_at_most(timeout, 0);
  } catch (const ControlError& e) {
    if (e.kind() != Kind::kAuthentication && e.kind() != Kind::kClosed) throw;
    throw ControlError(Kind::kAuthentication,
                       peer_ + (is_client ? " (the controller)" : " (a client)") +
                           " does not use this cluster key",
                       kKeyFix);
  }
}

void ControlConnection::send(const std::vector<uint8_t>& body, Millis timeout) {
  if (io_->closed) throw ControlError(Kind::kClosed, "connection to " + peer_ + " closed", "reconnect");
  if (body.size() > kMaxFrameBytes)
    throw ControlError(Kind::kMalformed,
                       "control frame of " + std::to_string(body.size()) + " bytes exceeds " +
                           std::to_string(kMaxFrameBytes),
                       "send large data over the data channel");
  std::vector<uint8_t> frame(4 + body.size() + kTag);
  const uint32_t len = static_cast<uint32_t>(body.size());
  std::memcpy(frame.data(), &len, 4);
  if (!body.empty()) std::memcpy(frame.data() + 4, body.data(), body.size());
  unsigned char nonce[crypto_aead_chacha20poly1305_ietf_NPUBBYTES];
  frame_nonce(sent_++, nonce);
  unsigned long long tag_len = 0;
  unsigned char none[1] = {0};
  crypto_aead_chacha20poly1305_ietf_encrypt_detached(none, frame.data() + 4 + body.size(),
                                                     &tag_len, none, 0, frame.data(),
                                                     4 + body.size(), nullptr, nonce,
                                                     send_key_.data());
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
  std::vector<uint8_t> frame(4 + size_t(len) + kTag);
  std::memcpy(frame.data(), &len, 4);
  read(frame.data() + 4, len + kTag);
  unsigned char nonce[crypto_aead_chacha20poly1305_ietf_NPUBBYTES];
  frame_nonce(received_++, nonce);
  unsigned char none[1] = {0};
  if (crypto_aead_chacha20poly1305_ietf_decrypt_detached(none, nullptr, none, 0,
                                                         frame.data() + 4 + len, frame.data(),
                                                         4 + size_t(len), nonce,
                                                         receive_key_.data()) != 0) {
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

void ControlConnection::close() {
  io_->closed = true;
  ::shutdown(io_->socket.native_handle(), SHUT_RDWR);  // a plain syscall: safe from any thread
}

}  // namespace dtrain::transport
