#pragma once
// The listening side of the control channel: accepts TCP connections on one port, runs the
// handshake (a client without the cluster key is refused and logged), and hands each
// authenticated connection to the handler on a thread of its own (control traffic is a few
// nodes and command-line clients, not a data path). stop() closes the listener and every open
// connection and joins the threads.
#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "transport/control/control_connection.h"

namespace dtrain::transport {

class ControlServer {
 public:
  using Handler = std::function<void(ControlConnection&)>;

  // Binds address:port (port 0: any free port). Throws TransportError when the port is taken.
  // Connections prove the identity they claim with the key `lookup` gives for it.
  ControlServer(const std::string& address, uint16_t port, KeyLookup lookup, Handler handler,
                ControlConnection::Millis handshake_timeout = ControlConnection::kDefaultTimeout);
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
  void stop();

 private:
  struct Session {
    std::thread thread;
    std::shared_ptr<ControlConnection> connection;  // set once authenticated
    std::atomic<bool> done{false};
  };
  void accept_loop();
  void reap_finished();

  KeyLookup lookup_;
  Handler handler_;
  ControlConnection::Millis handshake_timeout_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> refused_{0};
  std::thread acceptor_;
  std::mutex mutex_;
  std::list<Session> sessions_;  // guarded by mutex_
};

}  // namespace dtrain::transport
