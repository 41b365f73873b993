#pragma once
// The controller (docs/architecture/daemon.md, "The controller"): serves the control channel, the
// nodes' sessions and the clients' requests, and hands each to its collaborator: the job store
// (records, durable files), membership (nodes, sessions, liveness), the scheduler (queue,
// placement), the training and task job lifecycles, model fetches and request handling. One
// lock guards them all; each is tested on its own (tests/unit/controller_parts_test).
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "daemon/config/daemon_config.h"
#include "daemon/controller/job_store.h"
#include "daemon/controller/membership.h"
#include "daemon/controller/model_fetches.h"
#include "daemon/controller/request_handler.h"
#include "daemon/controller/scheduler.h"
#include "daemon/controller/stats_store.h"
#include "daemon/controller/task_jobs.h"
#include "daemon/controller/training_jobs.h"
#include "transport/control/control_connection.h"

namespace dtrain::daemon {

class Controller {
 public:
  // Its job records in files under data_dir, or in `records` (an elected controller's, in etcd).
  explicit Controller(const DaemonConfig& config, std::unique_ptr<JobRecords> records = nullptr);

  // Serves one control connection (a node's session or a client's request), on the control
  // server's thread for it; returns when the connection ends or stop() is called.
  void serve(transport::ControlConnection& connection);
  // Running jobs are cancelled on their nodes; sessions end.
  void stop();
  // An elected controller's fence (docs/architecture/daemon.md, "Standby controllers"): whether
  // it may act now, checked before any frame goes to a node; set before it serves anything.
  void set_fence(std::function<bool()> acts) { acts_ = std::move(acts); }
  // An elected controller's term ends (docs/architecture/daemon.md, "Standby controllers"):
  // sessions end without a word to the nodes, whose jobs keep training until the next leader
  // adopts them; nothing is saved or cancelled.
  void abdicate();

  // The port the control server bound (the configured one may be 0: any free port), for
  // `nodes --json`; set once, before any connection is served.
  void set_control_port(uint16_t port) { control_port_ = port; }
  // What `nodes --json` and `status --json` print (the controller's part of /status).
  Json nodes_json();
  Json jobs_json();
  // The dashboard's view of one job: its record, log, stats history and node names.
  Json dashboard_job(uint64_t job_id);

 private:
  // controller_sessions.cc: a node's session.
  void serve_node(transport::ControlConnection& c, const NodeRegistration& node);
  void serve_request(transport::ControlConnection& c, const control::Request& q,
                     size_t frame_bytes);
  bool receive_request_data(transport::ControlConnection& c, ClientRequest& request);
  // Registers `node` (refused: the reply says why); its session number.
  std::optional<uint64_t> register_node(transport::ControlConnection& c,
                                        const NodeRegistration& node);
  // The frames queued for it go out, its reports come in, until its connection ends, it falls
  // silent, a newer registration replaces it or the controller stops. Why it ended ("" when
  // the session was replaced or the controller stops: the node is not lost then).
  std::string node_session(transport::ControlConnection& c, const std::string& name,
                           uint64_t session);
  void on_job_message(Member& m, const JobMessageIn& in);
  // One malformed report fails that report, never the node's session.
  void on_job_message_safely(Member& m, const JobMessageIn& in);
  // A node that trains a job this controller is not running is told to stop.
  void stop_orphans(Member& m, const std::vector<uint64_t>& running);
  void stop_dropped_parts(Member& m, const std::vector<uint64_t>& running);
  void node_lost(Member& m, const std::string& why);
  std::vector<uint8_t> handle_request(const ClientRequest& request);
  std::vector<uint8_t> stats_request(const ClientRequest& request);

  // The running job's lifecycle, training or task.
  void start_next();
  void start_pass();
  void drop_from_job(JobRecord& job, const std::string& name, const std::string& why);
  // The end shared by every job: the log line, the record saved, the next job.
  void close_job(JobRecord& job);
  Json nodes_locked();
  static Json mesh_tree(const JobRecord& job);

  DaemonConfig config_;
  std::atomic<uint16_t> control_port_{0};
  std::mutex mutex_;  // guards everything below
  bool stopping_ = false;
  bool silenced_ = false;  // abdicated or fenced out: sessions end without sending
  std::function<bool()> acts_;  // an elected controller's fence; empty: always acts
  bool starting_ = false, start_again_ = false;  // start_next is running; run it once more
  JobStore store_;
  Membership members_;
  Scheduler scheduler_;
  std::unique_ptr<StatsStore> stats_;  // data_dir/controller/stats.db
  TrainingJobs training_;
  TaskJobs tasks_;
  ModelFetches fetches_;
  RequestHandler requests_;
};

}  // namespace dtrain::daemon
