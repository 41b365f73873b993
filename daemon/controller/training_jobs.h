#pragma once
// The life of a training job on the cluster (docs/architecture/daemon.md, "The controller"): it
// starts on the nodes the scheduler chose, the nodes' reports move it on, lost members are dropped
// and may rejoin, new nodes join an elastic job's vacant slots, a restarted controller adopts it,
// it goes on from its consistent checkpoint, and at the end the nodes' results are checked and
// merged. Its parts are in training_*.cc, one concept each. Not thread-safe: the controller calls
// it under its lock.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/spec/job_spec.h"
#include "daemon/config/daemon_config.h"
#include "daemon/controller/job_store.h"
#include "daemon/controller/membership.h"
#include "daemon/controller/nccl_ids.h"
#include "daemon/controller/node_use.h"
#include "daemon/controller/scheduler.h"
#include "daemon/controller/stats_store.h"
#include "daemon/protocol/control_messages.h"

namespace dtrain::daemon {

class TrainingJobs {
 public:
  // `closed`: the job has its final state (the controller logs it, saves it and starts the
  // next one). `start_next`: a job was queued (a resume) and may start now. `nccl_ids`: where
  // jobs' NCCL ids are made (default: helper processes of config.helper_program).
  TrainingJobs(const DaemonConfig& config, JobStore& store, Membership& members,
               Scheduler& scheduler, StatsStore& stats, std::function<void(JobRecord&)> closed,
               std::function<void()> start_next, std::unique_ptr<NcclIds> nccl_ids = nullptr);

  // ---- training_jobs.cc: start, reports, the end ----
  // Throws UserError when `owner` may never hold as many nodes as the job needs (its node limit
  // in dtraind.yaml's `limits`).
  void refuse_over_limits(const core::TrainingSpec& training, const std::string& owner) const;
  // Starts the queued job on free nodes (`use`: what the running jobs hold), or logs what it
  // waits for.
  StartOutcome start(JobRecord& job, const NodeUse& use);
  // A report of member `m` about `job` (one it is a member of; not a task).
  void on_report(JobRecord& job, Member& m, const JobMessageIn& in);
  // `name` leaves the running `job` (it goes on without it), whether or not its daemon is alive.
  void drop(JobRecord& job, const std::string& name, const std::string& why);
  // `dtrain-submit cancel` of the running job: every live node is told to stop.
  void cancel(JobRecord& job);
  // A node registered (again): the running job takes it back, adopts it, offers it a rejoin or a
  // vacant slot, or sends it what its old session lost.
  void on_registered(Member& m, const std::vector<uint64_t>& running_jobs);

  // ---- training_adoption.cc: a restarted controller adopts the running job ----
  void begin_adoption(JobRecord& job);
  void end_adoption_if_due();

  // ---- training_resume.cc ----
  // `dtrain-submit resume JOB`: queued again to go on from its consistent checkpoint.
  Json resume_request(JobRecord& job, const std::string& by);

 private:
  // The running training jobs (not tasks), in id order.
  std::vector<JobRecord*> running_jobs();
  NodeUse node_use_now() { return node_use(store_, scheduler_.running_ids()); }
  void save(const JobRecord& job) { store_.save(job); }
  // Queues `frame` for every live node of `job` but `except` (those not admitted yet too).
  void tell_others(const JobRecord& job, const std::string& except,
                   const std::vector<uint8_t>& frame);
  // Sends `start` to node `m` with a fresh part number, which its reports then carry.
  void send_start(JobRecord& job, Member& m, StartMessage start);
  // What a node is sent to start its part of `job` as member `rank`.
  StartMessage start_message(const JobRecord& job, size_t rank) const;
  // The NCCL id for a job's start messages, as they go out together (nccl_offer.h), and the
  // job's log line saying whether its nodes sum over NCCL.
  void offer_nccl(JobRecord& job, const core::TrainingSpec& training,
                  std::vector<StartMessage>& starts);
  // The controller fails the job (`failure`: {error, fix}): every node is told to stop.
  void stop_job(JobRecord& job, const Json& failure);
  // A job whose spec no longer parses (a record of another release) fails; the queue goes on.
  void fail_unparsable(JobRecord& job, const core::UserError& e);
  // The nodes `job`'s owner may still take under dtraind.yaml's limits (-1: any number).
  int64_t owner_allowance(const JobRecord& job, const NodeUse& use) const;
  // The job waits for its owner's running jobs to free nodes (kWaits: others may pass).
  StartOutcome wait_for_limit(JobRecord& job, int64_t allowance);
  void place(JobRecord& job, const core::JobSpec& spec, const std::vector<Member*>& nodes,
             const NodeUse& use);

  // training_reports.cc: what each report does.
  bool on_dropped_report(JobRecord& job, Member& m, const JobMessageIn& in);
  void on_rejoined(JobRecord& job, Member& m, const RejoinedReport& back);
  void on_result(JobRecord& job, Member& m, const JobMessageIn& in);
  void on_node_failed(JobRecord& job, Member& m, const FailedReport& failed, uint64_t part);
  void on_checkpoint(JobRecord& job, Member& m, const CheckpointReport& checkpoint);
  void check_finished(JobRecord& job);

  // training_finish.cc: the nodes' results checked and merged into the job's.
  void finish(JobRecord& job);
  void merge_results(JobRecord& job);

  // training_rejoin.cc: lost members coming back.
  void recall_dropped(Member& m, const std::vector<uint64_t>& running);
  void recall_dropped_from(JobRecord& job, Member& m, const std::vector<uint64_t>& running);
  void offer_rejoin(Member& m);  // by whichever running job dropped it
  void offer_rejoin_to(JobRecord& job, Member& m);
  void announce_rejoin(JobRecord& job, const std::string& name);
  void stop_rejoining(JobRecord& job, const std::string& name);

  // training_adoption.cc
  void adopt(Member& m, const std::vector<uint64_t>& running);
  void adopt_into(JobRecord& job, Member& m, const std::vector<uint64_t>& running);
  void end_adoption(JobRecord& job);

  // training_resume.cc: a job goes on from its consistent checkpoint.
  bool resume_from_checkpoint(JobRecord& job);
  StartOutcome start_resumed(JobRecord& job, const NodeUse& use);
  bool has_room(const JobRecord& job, const std::string& node, const NodeUse& use) const;
  std::vector<std::string> checkpoint_holders(const JobRecord& job, int64_t epoch) const;
  void resume_on(JobRecord& job, const std::vector<std::string>& names, int64_t epoch);
  void forget_run(JobRecord& job);

  // training_elastic.cc: training.nodes {min, max}.
  void add_vacant_slots(JobRecord& job, const core::TrainingSpec& training);
  void offer_join(Member& m);  // a vacant slot of a running elastic job, if it is free
  bool offer_join_to(JobRecord& job, Member& m);
  bool below_minimum(JobRecord& job);  // true when it stopped the job for it

  // training_data.cc: node-local data (data.train.shards).
  void on_shards(JobRecord& job, Member& m, const ShardsReport& list);
  void plan_data_if_ready(JobRecord& job);
  void resend_data_plan(Member& m);
  void send_kept_plan(const JobRecord& job, Member& m);

  const DaemonConfig& config_;
  JobStore& store_;
  Membership& members_;
  Scheduler& scheduler_;
  StatsStore& stats_;
  std::function<void(JobRecord&)> closed_;
  std::function<void()> start_next_;
  std::unique_ptr<NcclIds> nccl_ids_;
};

}  // namespace dtrain::daemon
