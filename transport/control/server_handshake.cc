#include "transport/control/server_handshake.h"

#include <cstring>
#include <optional>

#include "transport/control/control_error.h"
#include "transport/security/client_credential.h"

namespace dtrain::transport {

using namespace handshake;

std::shared_ptr<ServerHandshake> ServerHandshake::start(asio::ip::tcp::socket socket, std::string peer,
                            const KeyLookup& lookup, std::chrono::milliseconds timeout,
                            Done done) {
  std::shared_ptr<ServerHandshake> h(
      new ServerHandshake(std::move(socket), std::move(peer), lookup, std::move(done)));
  h->deadline_.expires_after(timeout);
  h->deadline_.async_wait([h](const asio::error_code& ec) {
    if (!ec) h->finish(h->peer_ + " did not complete the control handshake in time");
  });
  h->read(0, 4, &ServerHandshake::on_hello_start);
  return h;
}

ServerHandshake::ServerHandshake(asio::ip::tcp::socket socket, std::string peer,
                                 const KeyLookup& lookup, Done done)
    : socket_(std::move(socket)),
      deadline_(socket_.get_executor()),
      peer_(std::move(peer)),
      lookup_(lookup),
      done_(std::move(done)),
      in_(kHelloBytes + kMaxHelloText) {}

void ServerHandshake::abort() { finish("the server stopped"); }

void ServerHandshake::read(size_t at, size_t n, Step next) {
  auto self = shared_from_this();
  asio::async_read(socket_, asio::buffer(in_.data() + at, n),
                   [self, next](const asio::error_code& ec, size_t) {
                     if (self->finished_) return;
                     if (ec)
                       self->fail(self->peer_ + " closed the connection during the handshake: " +
                                  ec.message());
                     else
                       ((*self).*next)();
                   });
}

void ServerHandshake::write(Step next) {
  auto self = shared_from_this();
  asio::async_write(socket_, asio::buffer(out_), [self, next](const asio::error_code& ec, size_t) {
    if (self->finished_) return;
    if (ec)
      self->fail(self->peer_ + " closed the connection during the handshake: " + ec.message());
    else
      ((*self).*next)();
  });
}

void ServerHandshake::on_hello_start() {
  try {
    check_hello_start(in_.data(), peer_);
  } catch (const ControlError& e) {
    refusal_ = e.what();
    refuse_version();
    return;
  }
  read(4, kHelloBytes - 4, &ServerHandshake::on_hello);
}

// Our hello, with the refused verdict, tells a client of another version which version this is.
void ServerHandshake::refuse_version() {
  out_ = make_hello(1, "");
  write(&ServerHandshake::closed_after_refusal);
}

void ServerHandshake::on_hello() {
  who_.role = static_cast<ControlIdentity::Role>(in_[kVerdictAt]);
  // At most 255 bytes (one byte says how many), whoever says so: in_ already has room.
  read(kHelloBytes, in_[kTextLengthAt], &ServerHandshake::on_name);
}

void ServerHandshake::on_name() {
  who_.name.assign(reinterpret_cast<const char*>(in_.data() + kHelloBytes), in_[kTextLengthAt]);
  std::string refusal;
  std::optional<ClusterKey> key;
  if (who_.role != ControlIdentity::Role::kDaemon && who_.role != ControlIdentity::Role::kClient)
    refusal = "unknown role";
  else if (who_.role == ControlIdentity::Role::kClient && !valid_client_name(who_.name))
    refusal = "not a client name";
  else
    key = lookup_(who_, refusal);
  if (!key) {
    out_ = make_hello(1, refusal);
    refusal_ = peer_ + " (" + who_.describe() + ") refused: " + refusal +
               " (nothing to do unless it recurs: then find who on " + peer_ +
               " uses that credential)";
    write(&ServerHandshake::closed_after_refusal);
    return;
  }
  out_ = make_hello(0, "");
  cipher_ = FrameCipher(*key, in_.data(), out_.data(), who_, /*is_client=*/false);
  const std::vector<uint8_t> proof = cipher_.seal(nullptr, 0);
  out_.insert(out_.end(), proof.begin(), proof.end());
  write(&ServerHandshake::read_proof);
}

// The client's proof: an empty frame, so its length must be 0 (refused as soon as those 4 bytes
// arrive, before a byte more is read), then its 16-byte tag.
void ServerHandshake::read_proof() {
  read(0, kFrameHeaderBytes, &ServerHandshake::on_proof_length);
}

void ServerHandshake::on_proof_length() {
  uint32_t len = 0;
  std::memcpy(&len, in_.data(), kFrameHeaderBytes);
  if (len != 0) {
    fail(peer_ + " announced a control frame of " + std::to_string(len) +
         " bytes as its key proof (the key proof is empty)");
    return;
  }
  read(kFrameHeaderBytes, kTagBytes, &ServerHandshake::on_proof);
}

void ServerHandshake::on_proof() {
  if (!cipher_.open(in_.data(), 0)) {
    const bool daemon = who_.role == ControlIdentity::Role::kDaemon;
    fail(peer_ + " (" + who_.describe() + ")" +
         (daemon ? " does not use this cluster key (" + std::string(kKeyFix) + ")"
                 : " does not hold the key of " + who_.describe()));
    return;
  }
  finished_ = true;
  deadline_.cancel();
  std::string peer = peer_;
  std::unique_ptr<ControlConnection> c;
  try {
    c = ControlConnection::adopt(socket_.release(), std::move(peer), who_, std::move(cipher_));
  } catch (const ControlError& e) {
    done_(nullptr, e.what());
    return;
  }
  done_(std::move(c), "");
}

void ServerHandshake::finish(const std::string& refusal) {
  if (finished_) return;
  finished_ = true;
  deadline_.cancel();
  asio::error_code ignored;
  socket_.close(ignored);
  done_(nullptr, refusal);
}

}  // namespace dtrain::transport
