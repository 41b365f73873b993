#pragma once
// A node's side of the cluster (docs/architecture/daemon.md, "The node"): binds the data channel,
// registers with the controller over the authenticated control channel (reconnecting with a pause
// when it is away), sends heartbeats, starts the jobs the controller assigns (one JobRunner each)
// and passes their progress and results back. The node id is drawn once and kept in
// <data_dir>/node_id, so a restarted daemon is the same member.
#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "daemon/config/daemon_config.h"
#include "daemon/node/data_channel.h"
#include "daemon/node/gpu_inventory.h"
#include "daemon/node/job_part.h"
#include "daemon/node/job_runner.h"
#include "daemon/node/task_runner.h"
#include "transport/control/control_connection.h"
#include "transport/security/cluster_key.h"

namespace dtrain::daemon {

class NodeAgent {
 public:
  // Binds the data port now (throws TransportError / UserError naming the fix). `start_part`:
  // how a Start becomes this node's part of the job (default: a JobRunner on the data channel;
  // tests pass fakes).
  NodeAgent(const DaemonConfig& config, const transport::ClusterKey& key,
            JobPartFactory start_part = nullptr);
  ~NodeAgent();

  // Talks to the controller until `stop` is set; running jobs are then cancelled.
  void run(const std::atomic<bool>& stop);
  // This node, its jobs' latest figures and its data channel's counters per peer (/status).
  Json status();
  uint32_t node_id() const { return node_id_; }
  const std::string& data_address() const { return address_; }
  // The GPUs jobs may use here (dtraind.yaml's `gpus`, checked at start).
  const std::vector<kernels::GpuInfo>& gpus() const { return gpus_; }

 private:
  void session(const std::atomic<bool>& stop);
  ControllerAddress next_controller();
  NodeRegistration registration();
  void serve_session(transport::ControlConnection& c, const std::atomic<bool>& stop);
  void forget_finished_parts();
  // `part`: the StartJob.part the report answers (0: none; daemon/protocol/node_reports.h).
  void queue(uint64_t job_id, const NodeReport& report, uint64_t part = 0);
  static constexpr size_t kFramesPerTurn = 64;
  void send_outbox(transport::ControlConnection& c, std::chrono::milliseconds timeout,
                   size_t most = 0);
  void send_heartbeat(transport::ControlConnection& c);
  void on_job_message(const JobMessageIn& m);
  // on_job_message, where a message this node cannot carry out fails that message (a Start:
  // its job, reported Failed), not the controller session.
  void on_job_message_safely(const JobMessageIn& m);
  void on_task(uint64_t job_id, const TaskMessage& task);  // under jobs_mutex_
  void stop_jobs();  // cancels and joins every runner

  DaemonConfig config_;
  transport::ClusterKey key_;
  uint32_t node_id_ = 0;
  uint64_t boot_id_ = 0;  // random per start: tells the controller this process is new
  std::string address_;
  std::vector<kernels::GpuInfo> gpus_;
  std::unique_ptr<DataChannel> channel_;
  std::mutex mutex_;
  struct Queued {
    JobKind kind;
    std::vector<uint8_t> frame;
  };
  static constexpr size_t kMaxOutbox = 4096;
  std::deque<Queued> outbox_;  // reports for the controller; guarded by mutex_
  // Sent in this session and not yet counted by the controller (a Received frame): they go
  // back to the front of the outbox when the session ends. Numbered from 0 in each session,
  // heartbeats included (sent_); guarded by mutex_.
  struct Sent {
    uint64_t number;
    Queued frame;
  };
  std::deque<Sent> unacked_;
  uint64_t sent_ = 0;
  void acknowledged(uint64_t count);
  void requeue_unacknowledged();
  std::mutex jobs_mutex_;  // run()'s thread changes jobs_; status() reads it
  JobPartFactory start_part_;
  std::map<uint64_t, std::unique_ptr<JobPart>> jobs_;
  std::map<uint64_t, std::unique_ptr<TaskRunner>> tasks_;  // cluster eval/infer jobs
  std::atomic<bool> connected_{false};
  // Which of config_.controllers the next session tries, and a standby's word on who leads
  // (tried first, once): docs/architecture/daemon.md, "Standby controllers".
  size_t controller_at_ = 0;
  std::string leader_hint_;
  bool hopped_ = false;  // the last attempt went to a named leader at once
};

}  // namespace dtrain::daemon
