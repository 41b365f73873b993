#pragma once
// Cluster evaluation and inference jobs (docs/architecture/daemon.md, "Evaluation and inference
// jobs"): `dtrain-submit eval|infer MODEL --cluster` ships a model; the job's data is split into
// parts of whole batches (or, node-local, one part per file the nodes hold), each live node is
// given its share, a lost node's parts go to the others, and the parts are merged exactly at the
// end. Not thread-safe: the controller calls it under its lock.
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "daemon/config/daemon_config.h"
#include "daemon/controller/job_store.h"
#include "daemon/controller/membership.h"
#include "daemon/controller/node_use.h"
#include "daemon/controller/scheduler.h"
#include "daemon/protocol/client_requests.h"
#include "daemon/protocol/control_messages.h"

namespace dtrain::daemon {

class TaskJobs {
 public:
  // `closed`: the job has its final state (the controller logs it, saves it and starts the
  // next one).
  TaskJobs(const DaemonConfig& config, JobStore& store, Membership& members, Scheduler& scheduler,
           std::function<void(JobRecord&)> closed);

  // A checked task request with its model, as a record to queue; throws core::UserError when
  // the request is refused (bounds, paths, too many tasks already).
  JobRecord accept(const TaskRequest& request, SharedBytes model) const;
  // Throws core::UserError when as many tasks as the controller holds are unfinished already
  // (also asked before a task's model is received, so a full queue costs no upload).
  void check_room() const;
  // Starts the queued task on free nodes (`use`: what running jobs hold) within its owner's
  // node limit, or logs what it waits for.
  StartOutcome start(JobRecord& job, const NodeUse& use);
  void on_report(JobRecord& job, Member& m, const JobMessageIn& in);
  // A node of the running task is lost: its parts go to the others.
  void drop(JobRecord& job, const std::string& name, const std::string& why);
  // A node registering again: one the task dropped while it was away, still running its parts
  // (`running_jobs`), is told to stop (the others do them); one of the same process still in the
  // task is sent the parts it holds and has not reported (its old session's frames are gone).
  void on_registered(Member& m, const std::vector<uint64_t>& running_jobs);
  // Ends the task: the parts merged (a success), or its error; the nodes are told it is over.
  void finish(JobRecord& job, JobState state, const std::string& error, const std::string& fix);

 private:
  std::vector<JobRecord*> running_tasks();
  bool give_task_folder(JobRecord& job);
  void on_registered_to(JobRecord& job, Member& m, const std::vector<uint64_t>& running_jobs);
  void save(const JobRecord& job) { store_.save(job); }
  TaskMessage task_message(const JobRecord& job, std::vector<uint32_t> parts,
                           const std::string& node) const;
  void send_parts(JobRecord& job, Member& m, const std::vector<uint32_t>& parts);
  // Gives `parts` round robin to `nodes`: each becomes the holder of its share and is sent it in
  // a Task frame. The shares, by node.
  std::vector<std::vector<uint32_t>> deal_parts(JobRecord& job, const std::vector<Member*>& nodes,
                                                const std::vector<uint32_t>& parts);
  void on_part_done(JobRecord& job, Member& m, const PartDoneReport& done);
  void reassign_parts(JobRecord& job, const std::string& lost);
  void merge(JobRecord& job);

  // task_shards.cc: node-local evaluation (--shards): the nodes' lists, the parts made from
  // them, and a lost node's parts given to other holders of its files.
  void on_shards(JobRecord& job, Member& m, const ShardsReport& list);
  void plan_parts_if_ready(JobRecord& job);
  void reassign_shard_parts(JobRecord& job, const std::vector<uint32_t>& orphaned,
                            const std::string& lost);

  const DaemonConfig& config_;
  JobStore& store_;
  Membership& members_;
  Scheduler& scheduler_;
  std::function<void(JobRecord&)> closed_;
};

}  // namespace dtrain::daemon
