#pragma once
// HTTP on the status port (daemon/README.md, "Status and metrics"; loopback by default): /status as
// JSON and /metrics in Prometheus text format, both rendered on request from the daemon's live
// state.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "daemon/protocol/control_messages.h"

namespace httplib {
class Server;
}

namespace dtrain::daemon {

class StatusServer {
 public:
  // Binds address:port (0: any free port); throws core::UserError when it cannot.
  StatusServer(const std::string& address, uint16_t port, std::function<Json()> status);
  ~StatusServer();
  uint16_t port() const { return port_; }

 private:
  std::unique_ptr<httplib::Server> server_;
  uint16_t port_ = 0;
  std::thread thread_;
};

// The Prometheus text for a /status document (see status_server.cc for the metric names).
std::string prometheus_text(const Json& status);

}  // namespace dtrain::daemon
