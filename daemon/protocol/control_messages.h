#pragma once
// The control conversations (daemon/README.md) as ControlFrames (transport/schema/control.fbs):
// a node registers and then exchanges job messages with the controller on one long-lived
// connection; a command-line client sends one request per connection and reads the reply.
// Bodies are JSON (nlohmann): the same objects `dtrain-submit ... --json` prints.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "transport/control/control_connection.h"

namespace dtrain::transport::control {
struct Register;  // transport/schema/control.fbs
}

namespace dtrain::daemon {

using Json = nlohmann::json;

// What a node says about itself when it registers.
struct NodeRegistration {
  uint32_t node_id = 0;
  uint64_t boot_id = 0;
  std::string name, address;
  uint16_t data_port = 0;
  uint32_t cores = 1;
  struct Gpu {
    uint32_t index = 0;
    std::string name;
    uint64_t memory_bytes = 0;
  };
  std::vector<Gpu> gpus;
  std::vector<uint64_t> running_jobs;  // ids of the jobs it trains at the time it registers
};
std::vector<uint8_t> register_frame(const NodeRegistration& node);
// The registration in a received (verified) Register table; false without a name or address.
bool read_registration(const transport::control::Register& r, NodeRegistration& out);
// {index, name, memory_bytes} objects, as `dtrain-submit nodes --json` prints them.
Json gpus_json(const std::vector<NodeRegistration::Gpu>& gpus);
// kind: start | cancel | progress | result | failed | heartbeat | log
std::vector<uint8_t> job_frame(uint64_t job_id, const std::string& kind, const Json& body);
struct JobMessageIn {
  uint64_t job_id = 0;
  std::string kind;
  Json body;
};
// The job message in a received frame (verified first); false, never an exception, when the
// frame is malformed, holds something else, or its body is not JSON.
bool read_job_message(const std::vector<uint8_t>& frame, JobMessageIn& out);

// kind: submit | status | nodes | cancel | logs
std::vector<uint8_t> request_frame(const std::string& kind, uint64_t job_id, const Json& body);
std::vector<uint8_t> reply_ok(const Json& body);
std::vector<uint8_t> reply_error(const std::string& error, const std::string& fix);

// One request and its reply (dtrain-submit). Throws ControlError for the connection, and
// RequestRefused when the controller answered with an error.
class RequestRefused : public std::runtime_error {
 public:
  RequestRefused(const std::string& error, const std::string& fix)
      : std::runtime_error(error + "\n  fix: " + fix), error_(error), fix_(fix) {}
  const std::string& error() const { return error_; }
  const std::string& fix() const { return fix_; }

 private:
  std::string error_, fix_;
};
Json request(transport::ControlConnection& c, const std::string& kind, uint64_t job_id,
             const Json& body, std::chrono::milliseconds timeout);

// Job ids are random 64-bit values, shown as 16 hex digits.
std::string job_id_text(uint64_t id);
// Parses 16 (or fewer) hex digits; false if it is not one.
bool parse_job_id(const std::string& text, uint64_t& id);

}  // namespace dtrain::daemon
