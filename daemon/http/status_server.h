#pragma once
// HTTP on the status port (docs/architecture/daemon.md, "Status and metrics"; loopback by default):
// /status as JSON and /metrics in Prometheus text format, both rendered on request from the
// daemon's live state; and the read-only dashboard (/, /assets/NAME, /api/...).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "daemon/http/http_access.h"

namespace httplib {
class Server;
}

namespace dtrain::daemon {

using Json = nlohmann::json;

// What the dashboard reads (the controller's daemon only; elsewhere left empty and the
// dashboard says which port to open instead).
struct DashboardApi {
  std::function<Json()> jobs, nodes;     // arrays
  std::function<Json(uint64_t)> job;     // throws core::UserError for an unknown job
};

// Answers "ok" to any GET, without the Host check or the token: a probe's page, which tells a
// reader nothing but that the daemon serves HTTP.
inline constexpr char kHealthPath[] = "/healthz";

class StatusServer {
 public:
  // Binds address:port (0: any free port); throws core::UserError when it cannot. Serves
  // /status, /metrics, /healthz and the dashboard at / (docs/architecture/daemon.md,
  // "Dashboard"), to the requests `access` lets in (http_access.h); bodies and headers are
  // bounded.
  StatusServer(const std::string& address, uint16_t port, std::function<Json()> status,
               DashboardApi dashboard = {}, HttpAccess access = {});
  ~StatusServer();
  uint16_t port() const { return port_; }

 private:
  void guard(HttpAccess access);
  std::unique_ptr<httplib::Server> server_;
  uint16_t port_ = 0;
  std::thread thread_;
};

// The Prometheus text for a /status document (see status_server.cc for the metric names).
std::string prometheus_text(const Json& status);

}  // namespace dtrain::daemon
