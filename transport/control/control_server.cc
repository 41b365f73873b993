#include "transport/control/control_server.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <asio.hpp>

namespace dtrain::transport {

ControlServer::ControlServer(const std::string& address, uint16_t port, KeyLookup lookup,
                             Handler handler, ControlConnection::Millis handshake_timeout)
    : lookup_(std::move(lookup)), handler_(std::move(handler)), handshake_timeout_(handshake_timeout) {
  asio::error_code ec;
  const auto ip = asio::ip::make_address(address, ec);
  if (ec)
    throw TransportError("control address '" + address + "' is not an IP address",
                         "give the control channel an address such as 0.0.0.0 or 10.0.0.5");
  // Bound with Asio, then served with poll() so that stop() never waits on a blocked accept.
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io);
  const asio::ip::tcp::endpoint endpoint(ip, port);
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(64, ec);
  if (ec)
    throw TransportError("cannot listen on TCP " + address + ":" + std::to_string(port) + ": " +
                             ec.message(),
                         "another dtraind may be running, or pick a free port (control_port)");
  port_ = acceptor.local_endpoint().port();
  listen_fd_ = acceptor.release();
  acceptor_ = std::thread([this] { accept_loop(); });
}

ControlServer::~ControlServer() { stop(); }

void ControlServer::accept_loop() {
  while (!stopping_) {
    reap_finished();  // every turn: a busy server must not pile up finished threads
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::lock_guard<std::mutex> lock(mutex_);
    Session& s = sessions_.emplace_back();
    s.thread = std::thread([this, fd, &s] {
      std::shared_ptr<ControlConnection> c;
      try {
        c = ControlConnection::accept(fd, lookup_, handshake_timeout_);
      } catch (const ControlError& e) {
        ++refused_;
        spdlog::warn("control: refused a connection: {}", e.what());
        s.done = true;
        return;
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        s.connection = c;
        if (stopping_) c->close();
      }
      try {
        handler_(*c);
      } catch (const ControlError& e) {
        if (e.kind() != ControlError::Kind::kClosed)
          spdlog::warn("control: connection from {} ended: {}", c->peer(), e.what());
      } catch (const std::exception& e) {
        spdlog::error("control: handling {} failed: {}", c->peer(), e.what());
      }
      s.done = true;
    });
  }
}

void ControlServer::reap_finished() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (!it->done) {
      ++it;
      continue;
    }
    it->thread.join();
    it = sessions_.erase(it);
  }
}

void ControlServer::stop() {
  if (stopping_.exchange(true)) return;
  if (acceptor_.joinable()) acceptor_.join();
  ::close(listen_fd_);
  std::list<Session> sessions;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Session& s : sessions_)
      if (s.connection) s.connection->close();
    sessions.splice(sessions.end(), sessions_);
  }
  for (Session& s : sessions) s.thread.join();
}

}  // namespace dtrain::transport
