#include "transport/control/control_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <asio.hpp>

namespace dtrain::transport {

ControlServer::ControlServer(const std::string& address, uint16_t port, KeyLookup lookup,
                             Handler handler, ControlConnection::Millis handshake_timeout,
                             Limits limits)
    : lookup_(std::move(lookup)),
      handler_(std::move(handler)),
      handshake_timeout_(handshake_timeout),
      limits_(limits) {
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

namespace {

std::string source_address(const sockaddr_storage& a) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (a.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, text, sizeof text);
  else if (a.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, text, sizeof text);
  return text;
}

}  // namespace

std::string ControlServer::over_bound(const std::string& source) const {
  if (authenticated_ >= limits_.sessions)
    return std::to_string(authenticated_) + " sessions are open (the most)";
  if (handshaking_ >= limits_.handshakes)
    return std::to_string(handshaking_) + " connections are in their handshake (the most)";
  const auto it = handshaking_from_.find(source);
  if (it != handshaking_from_.end() && it->second >= limits_.handshakes_per_source)
    return std::to_string(it->second) + " connections from " + source +
           " are in their handshake (the most from one address)";
  return "";
}

void ControlServer::accept_loop() {
  while (!stopping_) {
    reap_finished();  // every turn: a busy server must not pile up finished threads
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    sockaddr_storage from{};
    socklen_t from_size = sizeof from;
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &from_size,
                             SOCK_CLOEXEC);
    if (fd < 0) continue;
    const std::string source = source_address(from);
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string why = over_bound(source);
    if (!why.empty()) {
      // Logged at the first and then every 1000th: a flood must not flood the log too.
      if (over_limit_++ % 1000 == 0)
        spdlog::warn("control: closed a connection from {} unread: {} ({} so far)", source, why,
                     over_limit_.load());
      ::close(fd);  // unread: nothing of it is held
      continue;
    }
    ++handshaking_;
    ++handshaking_from_[source];
    Session& s = sessions_.emplace_back();
    s.source = source;
    s.thread = std::thread([this, fd, &s] { serve(fd, s); });
  }
}

void ControlServer::serve(int fd, Session& s) {
  std::shared_ptr<ControlConnection> c;
  std::string refusal;
  try {
    c = ControlConnection::accept(fd, lookup_, handshake_timeout_);
  } catch (const ControlError& e) {
    refusal = e.what();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    --handshaking_;
    if (--handshaking_from_[s.source] == 0) handshaking_from_.erase(s.source);
    if (c && authenticated_ >= limits_.sessions)
      refusal = std::to_string(authenticated_) + " sessions are open (the most)";
    if (refusal.empty()) {
      ++authenticated_;
      s.connection = c;
      if (stopping_) c->close();
    }
  }
  if (!refusal.empty()) {
    ++refused_;
    spdlog::warn("control: refused a connection from {}: {}", s.source, refusal);
    s.done = true;
    return;
  }
  try {
    handler_(*c);
  } catch (const ControlError& e) {
    if (e.kind() != ControlError::Kind::kClosed)
      spdlog::warn("control: connection from {} ended: {}", c->peer(), e.what());
  } catch (const std::exception& e) {
    spdlog::error("control: handling {} failed: {}", c->peer(), e.what());
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    --authenticated_;
  }
  s.done = true;
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
