#pragma once
// dtrain-submit's calls to the controller: one request per connection, authenticated with the
// user's client credential or the cluster key (ClusterArgs), with a deadline.
#include <chrono>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "daemon/protocol/control_messages.h"
#include "submit/cluster_commands.h"

namespace dtrain::submit {

// The controller's JSON answer; `data`, when given, receives the bytes beside it (fetch).
// Throws ControlError (the connection) or daemon::RequestRefused (the controller said no).
daemon::Json call(const ClusterArgs& a, const daemon::ClientRequest& request,
                  std::vector<uint8_t>* data = nullptr,
                  std::chrono::seconds timeout = std::chrono::seconds(30));
// A request without arguments (status, nodes, cancel, logs, resume).
inline daemon::Json call(const ClusterArgs& a, daemon::RequestKind kind, uint64_t job_id) {
  return call(a, daemon::client_request(kind, job_id));
}
// Prints what went wrong (and the fix) and returns the exit code: 3 when the controller cannot
// be reached, 2 otherwise.
int report_error(const std::exception& e);
// Parses a job id argument; false (after saying so) when it is not one.
bool job_id_arg(const std::string& text, uint64_t& id);

}  // namespace dtrain::submit
