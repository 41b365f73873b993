// One authenticated request to the controller per call (transport/control), as every cluster
// subcommand of dtrain-submit makes it.
#include "submit/controller_client.h"

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "submit/exit_codes.h"
#include "transport/control/control_connection.h"
#include "transport/security/client_credential.h"
#include "transport/security/cluster_key.h"

namespace dtrain::submit {

using daemon::Json;
using transport::ControlError;

int report_error(const std::exception& e) {
  if (const auto* c = dynamic_cast<const ControlError*>(&e)) {
    std::fprintf(stderr, "error: %s\n", c->what());
    switch (c->kind()) {
      case ControlError::Kind::kUnreachable:
      case ControlError::Kind::kTimeout:
      case ControlError::Kind::kClosed:
        return kExitNoController;
      default:
        return kExitBadInput;
    }
  }
  if (const auto* r = dynamic_cast<const daemon::RequestRefused*>(&e)) {
    std::fprintf(stderr, "error: %s\n", r->error().c_str());
    if (!r->fix().empty()) std::fprintf(stderr, "  fix: %s\n", r->fix().c_str());
    return kExitBadInput;
  }
  std::fprintf(stderr, "error: %s\n", e.what());
  return kExitBadInput;
}

Json call(const ClusterArgs& a, const daemon::ClientRequest& request, std::vector<uint8_t>* data,
          std::chrono::seconds timeout) {
  std::string host = a.controller;
  long port = 7070;
  const size_t colon = host.rfind(':');
  if (colon != std::string::npos) {
    char* end = nullptr;
    port = std::strtol(host.c_str() + colon + 1, &end, 10);
    if (*end != '\0' || port < 1 || port > 65535)
      throw std::invalid_argument("--controller '" + a.controller +
                                  "' is not host:port\n  fix: e.g. --controller 10.0.0.1:7070");
    host = host.substr(0, colon);
  }
  // A user's own credential when given; the cluster key otherwise (operators on a daemon host).
  transport::ControlCredential who;
  if (!a.credential.empty()) {
    const transport::ClientCredential c = transport::load_client_credential(a.credential);
    who = {{transport::ControlIdentity::Role::kClient, c.name}, c.key};
  } else {
    who = transport::ControlCredential::daemon(transport::load_cluster_key(a.key_file));
  }
  auto c = transport::ControlConnection::connect(host, static_cast<uint16_t>(port), who,
                                                 std::chrono::milliseconds(a.connect_timeout_ms));
  return daemon::request(*c, request, timeout, data);
}

bool job_id_arg(const std::string& text, uint64_t& id) {
  if (daemon::parse_job_id(text, id)) return true;
  std::fprintf(stderr, "error: '%s' is not a job id (16 hex digits)\n  fix: list the jobs with "
                       "`dtrain-submit status`\n", text.c_str());
  return false;
}


}  // namespace dtrain::submit
