#include "transport/control/control_server.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <system_error>

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
  const asio::ip::tcp::endpoint endpoint(ip, port);
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(64, ec);
  if (ec)
    throw TransportError("cannot listen on TCP " + address + ":" + std::to_string(port) + ": " +
                             ec.message(),
                         "another dtraind may be running, or pick a free port (control_port)");
  port_ = acceptor_.local_endpoint().port();
  accept_next();
  reap_finished();
  io_thread_ = std::thread([this] { run_io(); });
}

ControlServer::~ControlServer() { stop(); }

// A handler that throws ends only itself: the io thread logs it and goes on (run() returns
// normally only once it is stopped or out of work).
void ControlServer::run_io() {
  for (;;) {
    try {
      io_.run();
      return;
    } catch (const std::exception& e) {
      spdlog::error("control: a connection's handler failed: {} (the server goes on)", e.what());
    }
  }
}

namespace {

// The /24 of an IPv4 address, the /64 of an IPv6 one: addresses one party tends to hold many of.
std::string address_range(const std::string& source) {
  asio::error_code ec;
  asio::ip::address a = asio::ip::make_address(source, ec);
  if (ec) return source;
  // An IPv4 peer of a dual-stack listener arrives as ::ffff:a.b.c.d: its /24, not ::/64.
  if (a.is_v6() && a.to_v6().is_v4_mapped())
    a = asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6());
  if (a.is_v4()) {
    auto b = a.to_v4().to_bytes();
    return std::to_string(b[0]) + "." + std::to_string(b[1]) + "." + std::to_string(b[2]) +
           ".0/24";
  }
  auto b = a.to_v6().to_bytes();
  std::fill(b.begin() + 8, b.end(), 0);
  return asio::ip::make_address_v6(b).to_string() + "/64";
}

bool is_client(const ControlConnection& c) {
  return c.peer_identity().role == ControlIdentity::Role::kClient;
}

}  // namespace

std::string ControlServer::over_session_bound(const ControlConnection& c,
                                              const std::string& source) const {
  if (authenticated_ >= limits_.sessions)
    return std::to_string(authenticated_) + " sessions are open (the most)";
  if (!is_client(c)) return "";
  const std::string& name = c.peer_identity().name;
  auto mine = sessions_of_client_.find(name);
  if (mine != sessions_of_client_.end() && mine->second >= limits_.sessions_per_client)
    return "client '" + name + "' has " + std::to_string(mine->second) +
           " sessions open (the most for one client)";
  auto from = client_sessions_from_.find(source);
  if (from != client_sessions_from_.end() && from->second >= limits_.client_sessions_per_source)
    return std::to_string(from->second) + " client sessions from " + source +
           " are open (the most from one address)";
  return "";
}

std::string ControlServer::over_bound(const std::string& source) const {
  if (authenticated_ >= limits_.sessions)
    return std::to_string(authenticated_) + " sessions are open (the most)";
  if (handshaking_ >= limits_.handshakes)
    return std::to_string(handshaking_) + " connections are in their handshake (the most)";
  const auto it = handshaking_from_.find(source);
  if (it != handshaking_from_.end() && it->second >= limits_.handshakes_per_source)
    return std::to_string(it->second) + " connections from " + source +
           " are in their handshake (the most from one address)";
  const std::string range = address_range(source);
  const auto r = handshaking_from_range_.find(range);
  if (r != handshaking_from_range_.end() && r->second >= limits_.handshakes_per_range)
    return std::to_string(r->second) + " connections from " + range +
           " are in their handshake (the most from one address range)";
  return "";
}

void ControlServer::accept_next() {
  acceptor_.async_accept([this](const asio::error_code& ec, asio::ip::tcp::socket socket) {
    if (stopping_ || !acceptor_.is_open()) return;
    if (!ec) admit(std::move(socket));
    accept_next();  // an error (out of descriptors, say) ends that connection, not the server
  });
}

void ControlServer::admit(asio::ip::tcp::socket socket) {
  asio::error_code ec;
  const auto remote = socket.remote_endpoint(ec);
  const std::string source = ec ? "?" : remote.address().to_string();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string why = over_bound(source);
    if (!why.empty()) {
      // Logged at the first and then every 1000th: a flood must not flood the log too.
      if (over_limit_++ % 1000 == 0)
        spdlog::warn("control: closed a connection from {} unread: {} ({} so far)", source, why,
                     over_limit_.load());
      socket.close(ec);  // unread: nothing of it is held
      return;
    }
    ++handshaking_;
    ++handshaking_from_[source];
    ++handshaking_from_range_[address_range(source)];
  }
  socket.set_option(asio::ip::tcp::no_delay(true), ec);
  const std::string peer = ec ? source : source + ":" + std::to_string(remote.port());
  handshakes_.push_back(ServerHandshake::start(
      std::move(socket), peer, lookup_, handshake_timeout_,
      [this, source](std::unique_ptr<ControlConnection> c, const std::string& refusal) {
        handshake_done(source, std::move(c), refusal);
      }));
}

void ControlServer::handshake_done(const std::string& source,
                                   std::unique_ptr<ControlConnection> c,
                                   const std::string& refusal) {
  std::string why = refusal;
  Session* s = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    --handshaking_;
    if (--handshaking_from_[source] == 0) handshaking_from_.erase(source);
    const std::string range = address_range(source);
    if (--handshaking_from_range_[range] == 0) handshaking_from_range_.erase(range);
    if (c && why.empty()) why = over_session_bound(*c, source);
    if (c && why.empty()) {
      s = &sessions_.emplace_back();
      s->connection = std::move(c);
      if (stopping_) s->connection->close();
      try {
        s->thread = std::thread([this, s] { serve(*s); });
      } catch (const std::system_error& e) {  // no thread to be had (TasksMax, say)
        why = std::string("no thread for its session: ") + e.what();
        sessions_.pop_back();
        s = nullptr;
      }
    }
    if (s) count_session(*s, source);
  }
  if (!s && !stopping_) {
    ++refused_;
    spdlog::warn("control: refused a connection from {}: {}", source, why);
  }
}

void ControlServer::count_session(Session& s, const std::string& source) {
  ++authenticated_;
  if (!is_client(*s.connection)) return;
  s.client = s.connection->peer_identity().name;
  s.source = source;
  ++sessions_of_client_[s.client];
  ++client_sessions_from_[source];
}

void ControlServer::serve(Session& s) {
  ControlConnection& c = *s.connection;
  try {
    handler_(c);
  } catch (const ControlError& e) {
    if (e.kind() != ControlError::Kind::kClosed)
      spdlog::warn("control: connection from {} ended: {}", c.peer(), e.what());
  } catch (const std::exception& e) {
    spdlog::error("control: handling {} failed: {}", c.peer(), e.what());
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    --authenticated_;
    if (!s.source.empty()) {
      if (--sessions_of_client_[s.client] == 0) sessions_of_client_.erase(s.client);
      if (--client_sessions_from_[s.source] == 0) client_sessions_from_.erase(s.source);
    }
  }
  s.done = true;
}

void ControlServer::reap_finished() {
  {
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
  handshakes_.remove_if([](const std::weak_ptr<ServerHandshake>& h) { return h.expired(); });
  reaper_.expires_after(std::chrono::milliseconds(100));
  reaper_.async_wait([this](const asio::error_code& ec) {
    if (!ec && !stopping_) reap_finished();
  });
}

void ControlServer::stop() {
  if (stopping_.exchange(true)) return;
  // On the I/O thread: nothing new is accepted, every handshake ends; then run() runs out of
  // work and returns.
  asio::post(io_, [this] {
    asio::error_code ignored;
    acceptor_.close(ignored);
    reaper_.cancel();
    for (auto& weak : handshakes_)
      if (auto h = weak.lock()) h->abort();
  });
  if (io_thread_.joinable()) io_thread_.join();
  std::list<Session> sessions;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Session& s : sessions_) s.connection->close();
    sessions.splice(sessions.end(), sessions_);
  }
  for (Session& s : sessions) s.thread.join();
}

}  // namespace dtrain::transport
