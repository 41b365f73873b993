#pragma once
// One job on this node, on a thread of its own: reads the spec (its data files must exist here
// at the same paths, or with data.train.shards the files the controller's plan gives this
// node; docs/architecture/daemon.md, "Node-local data"), joins the job's mesh on the node's data
// channel, trains its share with gradient sharing (core::train_local with a MeshExchange), reports
// progress and the result to the controller, and leaves the mesh only once every other node
// has finished, so that nothing it still has to relay is lost. A failure is reported by name;
// it never takes the daemon down.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/spec/job_spec.h"
#include "core/train/checkpoints.h"
#include "core/train/sync_choice.h"
#include "core/train/training_types.h"
#include "daemon/config/daemon_config.h"
#include "daemon/node/data_channel.h"
#include "daemon/node/job_part.h"
#include "daemon/node/mesh_exchange.h"
#include "transport/mesh/mesh_map.h"
#include "daemon/protocol/control_messages.h"

namespace dtrain::daemon {


class JobRunner : public JobPart {
 public:
  using Report = PartReport;

  // `predecessor`: this node's earlier part of the same job, which the job dropped while this
  // node was away (paused, cut off) and which this runner replaces (a rejoin): it is stopped
  // quietly and joined before this one joins the mesh.
  JobRunner(const DaemonConfig& config, DataChannel& channel, uint32_t self, uint64_t job_id,
            StartMessage start, Report report, std::unique_ptr<JobPart> predecessor = nullptr);
  ~JobRunner() override;  // cancels and joins

  void cancel() override;
  // The job dropped this part and another takes its place: it stops, and reports nothing more
  // (its progress and failure are no longer the job's).
  void drop() override;
  // A member restarted and rejoins, or a node new to the job joins it in a vacant slot
  // (elastic membership): it is admitted at the next epoch end.
  void rejoin(const RejoinMessage& rejoin) override;
  // Node-local data: the controller's plan (the files this node trains from).
  void plan(const DataPlanMessage& plan) override;
  bool done() const override { return done_; }
  // The latest progress and per-worker codec figures (for /status and /metrics).
  Json snapshot() const override;
  uint64_t job_id() const { return job_id_; }

 private:
  class ProgressReporter;
  struct TrainingInputs;
  // run()'s phases: join the job's mesh, train, report the result (or the failure).
  void run();
  // run()'s body: joins the job's mesh and trains (a node new to a running job checks its
  // inputs and waits for its data plan first). Anything it throws fails the job only (a start
  // message naming an address that is not an IP, or not naming this node).
  void join_and_train();
  std::chrono::milliseconds barrier_deadline() const;
  // The start message's peer timeout, within 0.5 s..10 min.
  std::chrono::milliseconds peer_timeout() const;
  void watch(MeshExchange& exchange, const std::vector<JobMember>& members);
  transport::MeshNode::Handlers mesh_handlers(MeshExchange& exchange);
  transport::MeshMap mesh_map(MeshExchange& exchange,
                              const std::vector<transport::MeshMember>& members);
  void expose(MeshExchange* exchange);
  // Runs `phase`; whatever it throws fails this part, by name. False when it threw.
  bool fails_part_on_throw(const std::function<void()>& phase);
  core::DataRoots input_roots() const;
  // The spec as this node reads it, the sync choice (a fresh start's), the data and options.
  void load_inputs(TrainingInputs& in, MeshExchange& exchange,
                   const std::vector<JobMember>& members);
  void train(TrainingInputs& in, MeshExchange& exchange, const std::vector<JobMember>& members);
  // mode allreduce between GPU nodes: the sums go over the controller's NCCL id where it sent
  // one (node_collective_path.h).
  void use_nccl_between_nodes(MeshExchange& exchange);
  void describe_part(const core::JobSpec& job, const MeshExchange& exchange,
                     const std::vector<JobMember>& members);
  void prepare(TrainingInputs& in, MeshExchange& exchange, const std::vector<JobMember>& members);
  // `training.sync: auto` made concrete in `in`: rank 0 measures and chooses, the others (and a
  // node rejoining later) take its choice (daemon/node/sync_election.h).
  void resolve_auto_sync(TrainingInputs& in, MeshExchange& exchange,
                         const std::vector<JobMember>& members);
  core::SyncChoice choose_sync(const core::JobSpec& job, MeshExchange& exchange,
                               const std::vector<JobMember>& members);
  core::SyncChoice measured_choice(const core::JobSpec& job, const core::TrainingSpec& training,
                                   MeshExchange& exchange, int nodes, int workers);
  bool checkpoint_shares(const core::JobSpec& job) const;
  void resume_from_checkpoint(TrainingInputs& in, MeshExchange& exchange);
  core::ResumePoint epoch_checkpoint(const std::string& model_path, const std::string& model_name,
                                     const std::string& spec_text) const;
  void sample_links(const std::vector<JobMember>& members);
  void leave_mesh_when_all_done(MeshExchange& exchange);
  ResultReport result_report(const TrainingInputs& in, const core::TrainingResult& r,
                             MeshExchange& exchange);
  void add_checks(ResultReport& result, const TrainingInputs& in, const core::TrainingResult& r);
  void fail(const std::string& error, const std::string& fix);
  // Node-local data: lists this node's files to the controller and waits for its plan.
  core::NodeLocalData await_data_plan(const core::JobSpec& job, std::chrono::milliseconds deadline);

  const DaemonConfig& config_;
  DataChannel& channel_;
  uint32_t self_;
  uint64_t job_id_;
  StartMessage start_;
  std::function<void(const NodeReport&)> report_;  // this part's reports, tagged with its part
  std::unique_ptr<ProgressReporter> progress_;
  std::unique_ptr<JobPart> predecessor_;
  std::atomic<bool> cancel_{false};
  std::atomic<bool> dropped_{false};
  std::atomic<bool> done_{false};
  // cancel() and rejoin() reach the exchange only while run() has it (it lives on run()'s stack).
  std::mutex exchange_mutex_;
  MeshExchange* exchange_ = nullptr;
  // Rejoins that came before the exchange existed (a Rejoin right behind the Start): applied
  // once it does. Bounded by the job's members (a repeat replaces nothing: at most a few).
  std::vector<RejoinMessage> early_rejoins_;
  std::mutex plan_mutex_;
  std::condition_variable plan_arrived_;
  std::optional<DataPlanMessage> plan_;
  void apply(MeshExchange& exchange, const RejoinMessage& rejoin);
  std::thread thread_;
};

}  // namespace dtrain::daemon
