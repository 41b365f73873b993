#pragma once
// The listening side of the control channel: accepts TCP connections on one port and runs
// their handshakes asynchronously on one I/O thread (ServerHandshake: a client without the key
// for the identity it claims is refused and logged), then hands each authenticated connection
// to the handler on a thread of its own (control traffic is a few nodes and command-line
// clients, not a data path; the controller's handlers block on their session). Connections are
// bounded (Limits): those still in their handshake, in total and per source address, and the
// authenticated sessions. One over a bound is closed as soon as it is accepted, before a byte
// of it is read. So a connection costs a thread only once it is authenticated, and no one can
// make the server hold more than the bounds' sockets, buffers and session threads.
// stop() closes the listener and every open connection and joins the threads.
#include <asio.hpp>
#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "transport/control/control_connection.h"
#include "transport/control/server_handshake.h"

namespace dtrain::transport {

struct ControlServerLimits {
  int handshakes = 64;            // connections not yet authenticated, in total
  int handshakes_per_source = 8;  // ... from one IP address
  int handshakes_per_range = 16;  // ... from one /24 (IPv4) or /64 (IPv6)
  int sessions = 1024;            // authenticated connections (nodes and clients)
  // A client credential's sessions (dtrain-submit opens one a request), and clients' sessions
  // from one IP address: one user cannot hold the slots nodes and other users need.
  int sessions_per_client = 16;
  int client_sessions_per_source = 64;
};

class ControlServer {
 public:
  using Handler = std::function<void(ControlConnection&)>;
  using Limits = ControlServerLimits;

  // Binds address:port (port 0: any free port). Throws TransportError when the port is taken.
  // Connections prove the identity they claim with the key `lookup` gives for it.
  ControlServer(const std::string& address, uint16_t port, KeyLookup lookup, Handler handler,
                ControlConnection::Millis handshake_timeout = ControlConnection::kDefaultTimeout,
                Limits limits = Limits());
  // Daemons with the cluster key only.
  ControlServer(const std::string& address, uint16_t port, const ClusterKey& key,
                Handler handler,
                ControlConnection::Millis handshake_timeout = ControlConnection::kDefaultTimeout)
      : ControlServer(address, port, daemons_only(key), std::move(handler), handshake_timeout) {}
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  uint16_t port() const { return port_; }
  // Connections refused because the client did not hold the key (or spoke something else).
  uint64_t refused() const { return refused_; }
  // Connections closed unread because a bound was reached.
  uint64_t over_limit() const { return over_limit_; }
  // Connections in their handshake now, and authenticated sessions open now.
  int handshaking() {
    std::lock_guard<std::mutex> lock(mutex_);
    return handshaking_;
  }
  int sessions() {
    std::lock_guard<std::mutex> lock(mutex_);
    return authenticated_;
  }
  void stop();

 private:
  struct Session {
    std::thread thread;
    std::shared_ptr<ControlConnection> connection;
    std::atomic<bool> done{false};
    std::string client, source;  // a client's name and address ("" for daemons)
  };
  void run_io();  // the I/O thread; a handler's exception is logged, not fatal
  // On the I/O thread: the next connection, and what becomes of it.
  void accept_next();
  void admit(asio::ip::tcp::socket socket);
  void handshake_done(const std::string& source, std::unique_ptr<ControlConnection> c,
                      const std::string& refusal);
  void serve(Session& s);
  // Under mutex_: a session started (its thread is running); serve() counts it out.
  void count_session(Session& s, const std::string& source);
  // Every 100 ms on the I/O thread: joins the threads of sessions that ended.
  void reap_finished();
  // Under mutex_: why a new connection from `source` may not be taken now ("" if it may).
  std::string over_bound(const std::string& source) const;
  // Under mutex_: why an authenticated connection may not have a session ("" if it may).
  std::string over_session_bound(const ControlConnection& c, const std::string& source) const;

  KeyLookup lookup_;
  Handler handler_;
  ControlConnection::Millis handshake_timeout_;
  Limits limits_;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> refused_{0}, over_limit_{0};
  std::mutex mutex_;
  std::list<Session> sessions_;  // guarded by mutex_, as are the counts below
  int handshaking_ = 0, authenticated_ = 0;
  std::map<std::string, int> handshaking_from_, handshaking_from_range_;
  std::map<std::string, int> sessions_of_client_, client_sessions_from_;
  std::list<std::weak_ptr<ServerHandshake>> handshakes_;  // the I/O thread's only
  // Declared last: destroyed first, with any handler still holding a handshake.
  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_{io_};
  asio::steady_timer reaper_{io_};
  std::thread io_thread_;
};

}  // namespace dtrain::transport
