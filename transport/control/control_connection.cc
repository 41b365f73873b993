#include "transport/control/control_connection.h"

#include <sodium.h>
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

// Version 2: the client names its role (and a client its name) in its hello, and the server
// answers with its verdict (transport/README.md, "The control channel").
constexpr uint8_t kVersion = kControlVersion;
constexpr size_t kNonceBytes = 32;
// "DTC", version, nonce, then the client's role or the server's verdict (0: go on, 1: refused),
// and the length of what follows: the client's name, or why the server refused.
constexpr size_t kHelloBytes = 4 + kNonceBytes + 2;
constexpr size_t kMaxHelloText = 255;
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

std::unique_ptr<ControlConnection> ControlConnection::accept(int socket_fd, const ClusterKey& key,
                                                             Millis timeout) {
  return accept(socket_fd, daemons_only(key), timeout);
}

std::unique_ptr<ControlConnection> ControlConnection::accept(int socket_fd, const KeyLookup& lookup,
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
  c->server_handshake(lookup, timeout);
  return c;
}

// Reads or writes exactly `n` bytes of the handshake before `deadline`; a timeout or a closed
// connection is reported as the handshake's failure.
void ControlConnection::handshake_io(bool write, uint8_t* data, size_t n,
                                     std::chrono::steady_clock::time_point deadline,
                                     bool is_client) {
  const auto left = std::max(Millis(1), std::chrono::duration_cast<Millis>(
                                            deadline - std::chrono::steady_clock::now()));
  const asio::error_code ec = io_->run(left, [&](auto handler) {
    if (write)
      asio::async_write(io_->socket, asio::buffer(data, n), handler);
    else
      asio::async_read(io_->socket, asio::buffer(data, n), handler);
  });
  const std::string check = is_client ? "check that " + peer_ + " is a dtrain control port"
                                      : "nothing to do unless it recurs: then find what on " +
                                            peer_ + " connects to this port";
  if (ec == asio::error::timed_out)
    throw ControlError(Kind::kTimeout, peer_ + " did not complete the control handshake in time",
                       check);
  if (ec)
    throw ControlError(Kind::kClosed, peer_ + " closed the connection during the handshake: " +
                                          ec.message(),
                       check);
}

namespace {

void check_hello_start(const uint8_t* hello, const std::string& peer) {
  if (std::memcmp(hello, "DTC", 3) != 0)
    throw ControlError(Kind::kMalformed, peer + " does not speak the dtrain control protocol",
                       "check that " + peer + " is a dtrain control port");
  if (hello[3] != kVersion)
    throw ControlError(Kind::kMalformed,
                       peer + " speaks control protocol version " + std::to_string(hello[3]) +
                           ", this program version " + std::to_string(kVersion),
                       "run the same dtrain release on every machine and every client");
}

}  // namespace

void ControlConnection::client_handshake(const ControlCredential& credential, Millis timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const std::string& name = credential.identity.name;
  std::vector<uint8_t> ours(kHelloBytes + name.size());
  std::memcpy(ours.data(), "DTC", 3);
  ours[3] = kVersion;
  randombytes_buf(ours.data() + 4, kNonceBytes);
  ours[4 + kNonceBytes] = static_cast<uint8_t>(credential.identity.role);
  ours[5 + kNonceBytes] = static_cast<uint8_t>(std::min(name.size(), kMaxHelloText));
  std::memcpy(ours.data() + kHelloBytes, name.data(), std::min(name.size(), kMaxHelloText));
  handshake_io(true, ours.data(), ours.size(), deadline, true);
  std::array<uint8_t, kHelloBytes> theirs{};
  handshake_io(false, theirs.data(), 4, deadline, true);
  check_hello_start(theirs.data(), peer_);
  handshake_io(false, theirs.data() + 4, kHelloBytes - 4, deadline, true);
  if (theirs[4 + kNonceBytes] != 0) {
    std::string why(theirs[5 + kNonceBytes], '\0');
    handshake_io(false, reinterpret_cast<uint8_t*>(why.data()), why.size(), deadline, true);
    throw ControlError(Kind::kAuthentication,
                       peer_ + " refused " + credential.identity.describe() + ": " + why,
                       credential.identity.role == ControlIdentity::Role::kClient
                           ? "ask the cluster's operator to list your credential (its .cred file "
                             "in the controller's clients_dir, then SIGHUP), or use another"
                           : kKeyFix);
  }
  peer_identity_ = {ControlIdentity::Role::kDaemon, ""};
  derive_keys(credential.key, ours.data(), theirs.data(), credential.identity, true);
  prove_key(timeout, true, credential.identity);
}

void ControlConnection::server_handshake(const KeyLookup& lookup, Millis timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::array<uint8_t, kHelloBytes> theirs{};
  std::array<uint8_t, kHelloBytes> ours{'D', 'T', 'C', kVersion};
  randombytes_buf(ours.data() + 4, kNonceBytes);
  handshake_io(false, theirs.data(), 4, deadline, false);
  try {
    check_hello_start(theirs.data(), peer_);
  } catch (const ControlError&) {
    // Our hello tells a client of another version which version this is.
    ours[4 + kNonceBytes] = 1;
    asio::error_code ignored;
    asio::write(io_->socket, asio::buffer(ours), ignored);
    throw;
  }
  handshake_io(false, theirs.data() + 4, kHelloBytes - 4, deadline, false);
  ControlIdentity who;
  who.role = static_cast<ControlIdentity::Role>(theirs[4 + kNonceBytes]);
  who.name.resize(theirs[5 + kNonceBytes]);  // at most 255 bytes, whoever says so
  handshake_io(false, reinterpret_cast<uint8_t*>(who.name.data()), who.name.size(), deadline, false);
  std::string refusal;
  std::optional<ClusterKey> key;
  if (who.role != ControlIdentity::Role::kDaemon && who.role != ControlIdentity::Role::kClient)
    refusal = "unknown role";
  else if (who.role == ControlIdentity::Role::kClient && !valid_client_name(who.name))
    refusal = "not a client name";
  else
    key = lookup(who, refusal);
  if (!key) {
    if (refusal.size() > kMaxHelloText) refusal.resize(kMaxHelloText);
    std::vector<uint8_t> no(ours.begin(), ours.end());
    no[4 + kNonceBytes] = 1;
    no[5 + kNonceBytes] = static_cast<uint8_t>(refusal.size());
    no.insert(no.end(), refusal.begin(), refusal.end());
    handshake_io(true, no.data(), no.size(), deadline, false);
    throw ControlError(Kind::kAuthentication,
                       peer_ + " (" + who.describe() + ") refused: " + refusal,
                       "nothing to do unless it recurs: then find who on " + peer_ +
                           " uses that credential");
  }
  handshake_io(true, ours.data(), ours.size(), deadline, false);
  peer_identity_ = who;
  derive_keys(*key, theirs.data(), ours.data(), who, false);
  prove_key(timeout, false, who);
}

// Keys for this connection: BLAKE2b keyed with the proving key (the cluster key, or the client's)
// over both nonces (client's first) and the client's role and name; the first half protects
// client -> server, the second server -> client.
void ControlConnection::derive_keys(const ClusterKey& key, const uint8_t* client_hello,
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

// Each side proves it holds the key with an empty authenticated frame. The proof must be empty:
// a peer that has not proven the key gets no allocation on its say-so.
void ControlConnection::prove_key(Millis timeout, bool is_client, const ControlIdentity& client) {
  send({}, timeout);
  try {
    receive_at_most(timeout, 0);
  } catch (const ControlError& e) {
    if (e.kind() != Kind::kAuthentication && e.kind() != Kind::kClosed) throw;
    const bool daemon = client.role == ControlIdentity::Role::kDaemon;
    throw ControlError(Kind::kAuthentication,
                       peer_ + (is_client ? " (the controller)" : " (" + client.describe() + ")") +
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
