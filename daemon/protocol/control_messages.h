#pragma once
// The control conversations (docs/architecture/daemon.md) as ControlFrames
// (daemon/protocol/control.fbs): a node registers and then exchanges job messages with the
// controller on one long-lived connection; a command-line client sends one request per connection
// and reads the reply. Every job message and node report is a typed table (node_reports.h for the
// reports); the requests and replies of command-line clients carry JSON: the objects `--json`
// prints.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "daemon/protocol/client_requests.h"
#include "daemon/protocol/job_id.h"
#include "daemon/protocol/model_fetch.h"
#include "daemon/protocol/node_reports.h"
#include "transport/control/control_connection.h"
#include "transport/wire/wire_version.h"
#include "daemon/protocol/control_generated.h"

namespace dtrain::daemon {

using Json = nlohmann::json;

// What a node says about itself when it registers.
struct NodeRegistration {
  uint32_t node_id = 0;
  uint64_t boot_id = 0;
  std::string name, address;
  uint16_t data_port = 0;
  uint8_t data_lanes = 1;  // data.lanes (docs/architecture/transport.md, "Lanes")
  // The wire version its data channel speaks; 0 from a node of a release before it was sent.
  uint8_t data_wire = transport::kWireVersion;
  uint16_t data_mtu = 1500;  // data.mtu (docs/operations.md, "Jumbo frames")
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
bool read_registration(const control::Register& r, NodeRegistration& out);
// {index, name, memory_bytes} objects, as `dtrain-submit nodes --json` prints them.
Json gpus_json(const std::vector<NodeRegistration::Gpu>& gpus);
const char* job_kind_name(JobKind kind);

// A member of a job as the controller placed it (control.fbs JobMember).
struct JobMemberInfo {
  uint32_t id = 0;
  std::string name, address;
  uint16_t port = 0;
  int workers = 1;
  bool gpu = false;  // its workers run on these GPUs, else on its CPU (wire: device "gpu"|"cpu")
  std::vector<int> gpus;
  uint64_t boot = 0;
  uint32_t cores = 0;  // a share of the node: the cores its workers compute on (0: the node's)
};
// What a node is sent to train its part of a job (control.fbs StartJob).
struct StartMessage {
  std::string spec, base_dir, name, mesh = "plain";
  uint32_t rank = 0;
  std::vector<JobMemberInfo> members;
  int64_t peer_timeout_ms = 10000;
  bool rejoin = false;
  std::vector<uint32_t> lost;
  int64_t resume_epoch = -1;  // >= 0: go on from the checkpoint with this many epochs done
  bool joining = false;       // with rejoin: new to the job, in a vacant slot
  uint64_t part = 0;          // echoed in the node's reports as "part" (0: none)
  // Other jobs' folders on the node this job may read (daemon/protocol/job_folder.h).
  std::vector<uint64_t> readable_jobs;
  // GPU nodes under mode allreduce: the NCCL communicator's id for the sums between nodes, or
  // empty, with why when the controller tried (control.fbs StartJob.nccl_id).
  std::vector<uint8_t> nccl_id;
  std::string nccl_why;
};
constexpr size_t kMaxReadableJobs = 4;
constexpr size_t kMaxNcclIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
constexpr uint32_t kMaxShareCores = 4096;  // training.cores_per_node's bound
// Member ids of an elastic job's vacant slots (node ids are drawn below them): slot k is
// kFirstSlotId + k; its member entry has no address until a node takes it.
constexpr uint32_t kFirstSlotId = 0xFFFFFFF0u;
constexpr uint32_t kMaxSlots = 16;
inline bool is_slot_id(uint32_t id) { return id >= kFirstSlotId; }
struct RejoinMessage {
  uint32_t id = 0;
  uint64_t boot = 0;
  // A node joining an elastic job: where it is and the slot it takes (slot 0: a rejoin).
  std::optional<JobMemberInfo> member;
  uint32_t slot = 0;
  bool withdrawn = false;  // it failed before it was admitted: take it as lost
};

// A cluster eval/infer job's parts for one node (control.fbs RunTask).
struct TaskMessage {
  TaskKind kind = TaskKind::Unknown;
  std::vector<uint8_t> model;
  std::string format, path, labels;  // the data (TaskData)
  std::string shards;                // node-local packed files (eval; path is then empty)
  int64_t label_column = -1, key_column = -1;
  bool header = false;
  std::vector<std::string> metrics;
  int64_t top_n = 1, batch_size = 256;
  std::string output_dir;
  std::vector<uint32_t> parts;
  uint32_t part_count = 0;
  std::vector<std::string> part_files;  // with shards: each part's file here, parallel to parts
};
std::vector<uint8_t> task_frame(uint64_t job_id, const TaskMessage& task);
// The same with `model` as its model (task.model is not read): the controller sends each node
// the record's one copy.
std::vector<uint8_t> task_frame(uint64_t job_id, const TaskMessage& task,
                                const std::vector<uint8_t>& model);
// The file part `part` of an inference job writes in its output folder: part-NNNNN.csv.
std::string part_file_name(uint32_t part);

// Node-local data (control.fbs DataPlan): the files a node trains from, every member's examples.
struct DataPlanMessage {
  std::vector<std::string> files;
  std::vector<int64_t> member_examples;
};
std::vector<uint8_t> data_plan_frame(uint64_t job_id, const DataPlanMessage& plan);

std::vector<uint8_t> start_frame(uint64_t job_id, const StartMessage& start);
std::vector<uint8_t> rejoin_frame(uint64_t job_id, const RejoinMessage& rejoin);
std::vector<uint8_t> cancel_frame(uint64_t job_id);
// To a node: the controller has read `count` frames of this session (docs/architecture/daemon.md,
// "Control conversations": the node keeps every report until it is counted here).
std::vector<uint8_t> received_frame(uint64_t count);

struct JobMessageIn {
  uint64_t job_id = 0;
  JobKind kind = JobKind::Heartbeat;
  NodeReport report;           // the report kinds (Progress ... PartDone)
  uint64_t received = 0;       // Received
  uint64_t part = 0;           // with a report: the part of the job it speaks for (StartJob.part)
  StartMessage start;          // kind Start
  RejoinMessage rejoin;        // kind Rejoin
  FetchMessage fetch;          // kind FetchModel
  ChunkMessage chunk;          // kind ModelChunk
  TaskMessage task;            // kind Task
  DataPlanMessage plan;        // kind DataPlan
};
// The job message in a received frame (verified first); false, never an exception, when the
// frame is malformed, holds something else, lacks its kind's table, or names figures no real
// job has (a rank outside the members, more members than a cluster has, unbounded lists).
bool read_job_message(const std::vector<uint8_t>& frame, JobMessageIn& out);


}  // namespace dtrain::daemon
