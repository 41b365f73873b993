#pragma once
// The controller (daemon/README.md, "The controller"): tracks member nodes (registration,
// heartbeats, loss), accepts jobs (the spec validated first), gives each a random 64-bit id, runs
// one at a time (the others queue), picks its nodes, builds the mesh, starts it on every node,
// follows it to the end, checks that the replicas agree, and keeps every job on disk.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "daemon/config/daemon_config.h"
#include "daemon/controller/job_record.h"
#include "daemon/controller/placement.h"
#include "daemon/controller/stats_store.h"
#include "daemon/protocol/node_reports_json.h"
#include "transport/control/control_connection.h"

namespace dtrain::daemon {

class Controller {
 public:
  explicit Controller(const DaemonConfig& config);

  // Serves one control connection (a node's session or a client's request), on the control
  // server's thread for it; returns when the connection ends or stop() is called.
  void serve(transport::ControlConnection& connection);
  // Running jobs are cancelled on their nodes; sessions end.
  void stop();

  // The port the control server bound (the configured one may be 0: any free port), for
  // `nodes --json`; set once, before any connection is served.
  void set_control_port(uint16_t port) { control_port_ = port; }
  // What `nodes --json` and `status --json` print (the controller's part of /status).
  Json nodes_json();
  Json jobs_json();
  // The dashboard's view of one job: its record, log, stats history and node names.
  Json dashboard_job(uint64_t job_id);

 private:
  struct Member {
    uint32_t id = 0;
    std::string name, address;
    uint16_t data_port = 0;
    uint8_t data_lanes = 1;
    uint32_t cores = 1;
    std::vector<NodeRegistration::Gpu> gpus;
    bool alive = false;
    uint64_t session = 0;  // the live session's number (a re-registration replaces it)
    uint64_t boot_id = 0;  // of the daemon process that registered
    std::chrono::steady_clock::time_point last_heard;
    std::deque<std::vector<uint8_t>> outbox;  // frames for the node
  };

  // A request kind this release answers (any credential may ask it: clients send requests
  // only, and requests are all dtrain-submit's).
  static bool known_request(RequestKind kind);
  void serve_node(transport::ControlConnection& c, const NodeRegistration& node);
  std::vector<uint8_t> handle_request(const ClientRequest& request);
  void on_job_message(Member& m, const JobMessageIn& in);
  void on_job_message_safely(Member& m, const JobMessageIn& in);
  void on_node_failed(JobRecord& job, Member& m, const FailedReport& failed, uint64_t part);
  void on_checkpoint(JobRecord& job, Member& m, const CheckpointReport& checkpoint);
  bool on_dropped_report(JobRecord& job, Member& m, const JobMessageIn& in);
  void recall_dropped(Member& m, const std::vector<uint64_t>& running);
  // controller_fetch.cc: `dtrain-submit fetch`, one chunk of a finished job's model per call
  // (locks mutex_ itself: it waits for the node's answer unlocked).
  std::vector<uint8_t> fetch_request(const ClientRequest& request);
  std::vector<uint8_t> stats_request(const ClientRequest& request);
  static Json mesh_tree(const JobRecord& job);
  Json node_names_locked() const;  // under mutex_
  void on_model_chunk(Member& m, const JobMessageIn& in);
  struct PendingFetch;
  std::optional<PendingFetch> ask_for_chunk(std::unique_lock<std::mutex>& lock,
                                            const std::string& node, const FetchMessage& fetch,
                                            uint64_t job_id);

  // Under mutex_:
  static NodeOffer offer(const Member& m);  // what placement needs to know of a node
  void stop_orphans(Member& m, const std::vector<uint64_t>& running);
  std::vector<NodeOffer> alive_offers() const;
  Json nodes_locked();
  Json jobs_locked();
  Json submit(const ClientRequest& request);
  // Gives `job` an id and queues it (saved first); its status.
  Json enqueue(JobRecord job);
  void start_next();
  void node_lost(Member& m, const std::string& why);
  // `name` leaves the running `job` (it goes on without it), whether or not its daemon is alive.
  void drop_from_job(JobRecord& job, const std::string& name, const std::string& why);
  // A restarted controller adopts the job that was running (controller_adoption.cc): its nodes
  // keep training while the controller is away and are adopted as they register again.
  void begin_adoption(JobRecord& job);
  void adopt(Member& m, const std::vector<uint64_t>& running);
  void end_adoption_if_due();
  void end_adoption(JobRecord& job);
  // controller_resume.cc: a job goes on from its consistent checkpoint.
  bool resume_from_checkpoint(JobRecord& job);
  Json resume_request(JobRecord& job);
  bool start_resumed(JobRecord& job);
  std::vector<std::string> checkpoint_holders(const JobRecord& job, int64_t epoch) const;
  void resume_on(JobRecord& job, const std::vector<std::string>& names, int64_t epoch);
  // A lost member of the running job registered again: it is sent the job to rejoin (either
  // mode). Once its new part reports Attached (on the job's mesh), announce_rejoin tells the
  // others to admit it at their next epoch end.
  void offer_rejoin(Member& m);
  void announce_rejoin(JobRecord& job, const std::string& name);
  // It is no longer waiting to be admitted (admitted, failed, or dropped).
  void stop_rejoining(JobRecord& job, const std::string& name);
  // controller_elastic.cc: training.nodes {min, max}.
  void add_vacant_slots(JobRecord& job, const core::TrainingSpec& training);
  void offer_join(Member& m);
  bool below_minimum(JobRecord& job);  // true when it stopped the job for it
  // controller_data.cc: node-local data (data.train.shards).
  void on_shards(JobRecord& job, Member& m, const ShardsReport& list);
  void plan_data_if_ready(JobRecord& job);
  void resend_data_plan(Member& m);
  void send_kept_plan(const JobRecord& job, Member& m);  // its part of job.data_plan
  // The controller fails the job (`failure`: {error, fix}): every node is told to stop.
  void stop_job(JobRecord& job, const Json& failure);
  // Queues `frame` for every live node of `job` but `except` (those not admitted yet too).
  void tell_others(const JobRecord& job, const std::string& except,
                   const std::vector<uint8_t>& frame);
  // Sends `start` to node `m` with a fresh part number, which its reports then carry.
  void send_start(JobRecord& job, Member& m, StartMessage start);
  // What a node is sent to start its part of `job` as member `rank`.
  StartMessage start_message(const JobRecord& job, size_t rank) const;
  // controller_tasks.cc: cluster evaluation and inference jobs.
  Json submit_task(const TaskRequest& request, const std::vector<uint8_t>& model);
  void start_task(JobRecord& job);
  TaskMessage task_message(const JobRecord& job, std::vector<uint32_t> parts,
                           const std::string& node) const;
  // Node-local evaluation (controller_task_shards.cc): the nodes' lists, the parts made from
  // them, and a lost node's parts given to other holders of its files.
  void on_task_shards(JobRecord& job, Member& m, const ShardsReport& list);
  void plan_task_parts_if_ready(JobRecord& job);
  void reassign_shard_parts(JobRecord& job, const std::vector<uint32_t>& orphaned,
                            const std::string& lost);
  void send_parts(JobRecord& job, Member& m, const std::vector<uint32_t>& parts);
  void on_task_report(JobRecord& job, Member& m, const JobMessageIn& in);
  void reassign_parts(JobRecord& job, const std::string& lost);
  // Gives `parts` round robin to `nodes`: each becomes the holder of its share and is sent it in
  // a Task frame. The shares, by node.
  std::vector<std::vector<uint32_t>> deal_parts(JobRecord& job, const std::vector<Member*>& nodes,
                                                const std::vector<uint32_t>& parts);
  // A node registering again from the same process (its old session's frames are gone): it
  // is sent the running task's parts it holds and has not reported.
  void resend_parts(Member& m);
  void finish_task(JobRecord& job, JobState state, const std::string& error,
                   const std::string& fix);
  void check_finished(JobRecord& job);
  void finish(JobRecord& job);
  // The end shared by finish and finish_task: the log line, the record saved, the next job.
  void close_job(JobRecord& job);
  void save(const JobRecord& job);

  DaemonConfig config_;
  std::atomic<uint16_t> control_port_{0};
  std::string jobs_dir_;
  std::unique_ptr<StatsStore> stats_;  // data_dir/controller/stats.db
  std::mutex mutex_;
  bool stopping_ = false;
  uint64_t next_session_ = 1;
  std::map<std::string, Member> members_;       // by name
  std::map<uint64_t, JobRecord> jobs_;
  std::deque<uint64_t> queue_;
  uint64_t running_ = 0;  // 0: none
  struct PendingFetch {  // a FetchModel sent to `node`, waiting for its ModelChunk
    std::string node;
    uint64_t session = 0;  // the node's session it was sent on: another one lost it
    uint64_t job_id = 0, offset = 0;
    bool answered = false;
    ChunkMessage chunk;
  };
  std::map<uint64_t, PendingFetch> fetches_;  // by request number
  uint64_t next_fetch_ = 0;  // drawn at start: a chunk queued before a restart matches nothing
  std::condition_variable fetched_;  // a fetch was answered, or its node lost
};

}  // namespace dtrain::daemon
