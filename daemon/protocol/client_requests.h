#pragma once
// What a command-line client asks the controller, and the answer (daemon/protocol/control.fbs
// Request and Reply): one struct with each request kind's arguments, one builder
// (request_frame) and one reader (read_request). A client sends one request per connection;
// the reply's body is JSON, the very object `dtrain-submit ... --json` prints.
#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "daemon/protocol/control_generated.h"
#include "daemon/protocol/requester.h"
#include "transport/control/control_connection.h"

namespace dtrain::daemon {

using Json = nlohmann::json;
using RequestKind = control::RequestKind;
// The word for a request kind in messages ("submit", "status", ...).
std::string request_kind_name(RequestKind kind);

// What a cluster eval/infer job does; its word ("eval", "infer") only in records and JSON.
using TaskKind = control::TaskKind;
const char* task_kind_word(TaskKind kind);  // "" for Unknown
TaskKind parse_task_kind(const std::string& word);  // Unknown for any other word

// A cluster eval/infer job as a client asks for it; the controller checks it
// (controller/task_request.h).
struct TaskRequest {
  TaskKind task = TaskKind::Unknown;
  std::string name, format, path, labels;
  std::string shards;  // eval, node-local: instead of path
  int64_t label_column = -1, key_column = -1;
  bool header = false;
  int64_t top_n = 1, batch_size = 256;
  int64_t nodes = 0;  // 0: every registered node
  std::vector<std::string> metrics;
  std::string output_dir;
  bool keep_parts = false;
  std::string roc_csv;
  std::vector<std::string> roc_classes;
};

// Bytes beside a request (a task's model), held once however many hands they pass through.
using SharedBytes = std::shared_ptr<const std::vector<uint8_t>>;
inline SharedBytes shared_bytes(std::vector<uint8_t> bytes) {
  return std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
}

struct ClientRequest {
  RequestKind kind = RequestKind::Unknown;
  uint64_t job_id = 0;
  // Submit
  std::string spec, base_dir = ".", source = "job.yaml";
  // Status: the job's log lines from this one on come with it.
  std::optional<uint64_t> log_from;
  // Fetch: a chunk of the model file, from `node`'s copy (empty: any); Stats: `node`'s rows.
  uint64_t offset = 0;
  uint32_t length = 8u << 20;
  std::string node;
  // Task: the job, with the model file in `data` (sent in a RequestData frame of its own after
  // the request's, which announces its size: data_bytes).
  std::optional<TaskRequest> task;
  SharedBytes data;  // shared: the controller hands it to the task's record without a copy
  uint64_t data_bytes = 0;
  size_t data_size() const { return data ? data->size() : 0; }
  // Set by the controller from the authenticated connection; no frame carries it.
  Requester who;
};

// A request of `kind` about `job_id` (0: none), its arguments left at their defaults.
inline ClientRequest client_request(RequestKind kind, uint64_t job_id = 0) {
  ClientRequest r;
  r.kind = kind;
  r.job_id = job_id;
  return r;
}

// The request's frame (without `data`: it announces data.size() in data_bytes), and the frame
// that carries the data after it.
std::vector<uint8_t> request_frame(const ClientRequest& request);
std::vector<uint8_t> request_data_frame(const std::vector<uint8_t>& data);
// The largest first frame a client session may send (the request: a spec of at most 1 MiB and
// its texts), and the largest data a request may announce (a task's model).
constexpr uint32_t kClientRequestFrameBytes = (1u << 20) + (64u << 10);
constexpr uint64_t kMaxRequestDataBytes = (64u << 20) - (64u << 10);
// The request in a received (verified) Request table of a frame of `frame_bytes` (its texts
// together take no more; daemon/protocol/wire_text.h). False when a text is longer than any real
// request's (a spec of more than 1 MiB, a path of more than 4096 bytes), or a list longer.
bool read_request(const control::Request& table, size_t frame_bytes,
                  ClientRequest& out);

// `data`: bytes beside the JSON (a fetched chunk of a model file).
std::vector<uint8_t> reply_ok(const Json& body, const std::vector<uint8_t>& data = {});
std::vector<uint8_t> reply_error(const std::string& error, const std::string& fix);
// A standby controller's refusal, naming the leader's control address ("" when none leads).
std::vector<uint8_t> reply_not_leader(const std::string& error, const std::string& fix,
                                      const std::string& leader);

// One request and its reply (dtrain-submit). Throws ControlError for the connection, and
// RequestRefused when the controller answered with an error.
class RequestRefused : public std::runtime_error {
 public:
  RequestRefused(const std::string& error, const std::string& fix, std::string standby_of = "")
      : std::runtime_error(error + "\n  fix: " + fix), error_(error), fix_(fix),
        standby_of_(std::move(standby_of)) {}
  const std::string& error() const { return error_; }
  const std::string& fix() const { return fix_; }
  // Refused by a standby controller: the leader's control address ("" when none leads).
  bool by_standby() const { return standby_; }
  const std::string& leader() const { return standby_of_; }
  RequestRefused& from_standby() {
    standby_ = true;
    return *this;
  }

 private:
  std::string error_, fix_, standby_of_;
  bool standby_ = false;
};
// `data`, when given, receives the reply's bytes beside the JSON.
Json request(transport::ControlConnection& c, const ClientRequest& request,
             std::chrono::milliseconds timeout, std::vector<uint8_t>* data = nullptr);

}  // namespace dtrain::daemon
