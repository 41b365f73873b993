// One authenticated request to the controller per call (transport/control), as every cluster
// subcommand of dtrain-submit makes it.
#include "submit/controller_client.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <stdexcept>

#include "daemon/config/daemon_config.h"
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

namespace {

struct Address {
  std::string host;
  uint16_t port = 7070;
};

// "host[:port]" (7070 when left out).
Address parse_address(const std::string& text, const std::string& given) {
  if (text.empty())
    throw std::invalid_argument("--controller '" + given + "' names no host\n  fix: e.g. "
                                "--controller 10.0.0.1:7070");
  const std::optional<daemon::ControllerAddress> address = daemon::parse_host_port(text, 7070);
  if (!address)
    throw std::invalid_argument("--controller '" + given + "' is not host:port (or a list of "
                                "them)\n  fix: e.g. --controller 10.0.0.1:7070 or "
                                "--controller 10.0.0.1:7070,10.0.0.2:7070");
  return {address->host, address->port};
}

// --controller A,B,C: standby controllers (docs/operations.md, "Standby controllers").
std::vector<Address> controller_list(const std::string& given) {
  std::vector<Address> out;
  size_t from = 0;
  for (size_t comma; (comma = given.find(',', from)) != std::string::npos; from = comma + 1)
    out.push_back(parse_address(given.substr(from, comma - from), given));
  out.push_back(parse_address(given.substr(from), given));
  return out;
}

// The connection (or its handshake: a standby may not list this client) failed before the
// request went out.
struct NotReached {
  ControlError error;
};

Json call_one(const ClusterArgs& a, const Address& at, const daemon::ClientRequest& request,
              std::vector<uint8_t>* data, std::chrono::seconds timeout) {
  // A user's own credential when given; the cluster key otherwise (operators on a daemon host).
  transport::ControlCredential who;
  if (!a.credential.empty()) {
    const transport::ClientCredential c = transport::load_client_credential(a.credential);
    who = {{transport::ControlIdentity::Role::kClient, c.name}, c.key};
  } else {
    who = transport::ControlCredential::daemon(transport::load_cluster_key(a.key_file));
  }
  std::unique_ptr<transport::ControlConnection> c;
  try {
    c = transport::ControlConnection::connect(at.host, at.port, who,
                                              std::chrono::milliseconds(a.connect_timeout_ms));
  } catch (const ControlError& e) {
    throw NotReached{e};  // nothing was asked yet: any request may go to another
  }
  return daemon::request(*c, request, timeout, data);
}

// Whether another controller may be asked after the request went out and failed. Not one that
// changes something (a submission, a task, a resume): it may have taken effect, and asking
// again elsewhere could do it twice.
bool try_another(const ControlError& e, daemon::RequestKind kind) {
  const bool changes = kind == daemon::RequestKind::Submit || kind == daemon::RequestKind::Task ||
                       kind == daemon::RequestKind::Resume;
  return !changes &&
         (e.kind() == ControlError::Kind::kTimeout || e.kind() == ControlError::Kind::kClosed);
}

}  // namespace

// Each listed controller in turn, from the one that answered last; a standby's answer names the
// leader, tried next. Nobody leading is "cannot reach the controller" (exit code 3).
Json call(const ClusterArgs& a, const daemon::ClientRequest& request, std::vector<uint8_t>* data,
          std::chrono::seconds timeout) {
  const std::vector<Address> list = controller_list(a.controller);
  static size_t first = 0;  // a following client's calls go to the leader it found
  std::string why;
  // Refused by every controller's handshake (a wrong key or credential): that, not "nobody
  // leads".
  std::optional<ControlError> refused;
  bool other = false;
  for (size_t k = 0; k < list.size(); ++k) {
    const size_t i = (first + k) % list.size();
    Address at = list[i];
    for (int hop = 0; hop < 2; ++hop) {  // the listed one, then the leader it names
      try {
        Json answer = call_one(a, at, request, data, timeout);
        first = i;
        return answer;
      } catch (const daemon::RequestRefused& r) {
        if (!r.by_standby()) throw;
        why = r.error();
        other = true;
        if (r.leader().empty() || hop == 1) break;
        try {
          at = parse_address(r.leader(), r.leader());
        } catch (const std::invalid_argument&) {  // a standby's garbled word: the next listed
          break;
        }
      } catch (const NotReached& n) {
        if (list.size() == 1) throw n.error;
        why = n.error.what();
        if (n.error.kind() == ControlError::Kind::kAuthentication) refused = n.error;
        else other = true;
        break;
      } catch (const ControlError& e) {
        if (!try_another(e, request.kind) || list.size() == 1) throw;
        why = e.what();
        other = true;
        break;
      }
    }
  }
  if (refused && !other) throw *refused;
  throw ControlError(ControlError::Kind::kUnreachable,
                     "no controller of " + a.controller + " leads now (last: " + why + ")",
                     "a standby takes over within two leases of etcd; try again, or check the "
                     "controllers' logs");
}

bool job_id_arg(const std::string& text, uint64_t& id) {
  if (daemon::parse_job_id(text, id)) return true;
  std::fprintf(stderr, "error: '%s' is not a job id (16 hex digits)\n  fix: list the jobs with "
                       "`dtrain-submit status`\n", text.c_str());
  return false;
}


}  // namespace dtrain::submit
