// Node-local data (data.train.shards; docs/architecture/daemon.md, "Node-local data"): every node
// of the job lists the export's files it holds; once every live node has, the controller gives each
// file to one holder (daemon/controller/data_plan.h) and sends every node its part of the plan.
#include <spdlog/spdlog.h>

#include "daemon/controller/training_jobs.h"

namespace dtrain::daemon {

void TrainingJobs::on_shards(JobRecord& job, Member& m, const ShardsReport& list) {
  if (!job.data_plan.is_null()) {
    send_kept_plan(job, m);  // a node back in the job (a rejoin) trains from the files it had
    return;
  }
  if (!list.error.empty()) {  // the reader found an entry no real node sends
    stop_job(job, {{"error", m.name + " sent a list of its data.train.shards files the controller "
                                      "cannot read (" + list.error + ")"},
                   {"fix", "run the same dtrain release on every node"}});
    return;
  }
  job.shard_lists[m.name] = list.files;
  plan_data_if_ready(job);
  if (job.data_plan.is_null()) save(job);  // the lists so far, for a restarted controller
}

void TrainingJobs::plan_data_if_ready(JobRecord& job) {
  if (!job.data_plan.is_null() || job.shard_lists.empty() || job.finished() ||
      job.cancel_requested)
    return;
  for (const std::string& n : job.nodes)
    if (!job.dropped(n) && !job.shard_lists.count(n)) return;  // its list is still to come
  std::vector<std::string> members;
  for (const Json& member : job.members) members.push_back(member.value("name", std::string()));
  // A node lost since it listed would be dealt files whose minibatches are then skipped: only
  // the lists of nodes that wait for the plan (live, or rejoining) count.
  std::map<std::string, std::vector<ShardFile>> waiting;
  for (auto& [n, files] : job.shard_lists)
    if (!job.dropped(n) || listed(job.rejoining, n)) waiting[n] = std::move(files);
  job.shard_lists.clear();
  const DataPlan plan = make_data_plan(members, waiting);
  if (!plan.error.empty()) {
    stop_job(job, {{"error", "data.train.shards: " + plan.error}, {"fix", plan.fix}});
    return;
  }
  job.data_plan = data_plan_json(plan);
  job.add_log(plan.summary);
  for (const auto& [n, files] : waiting)
    members_.send_if_alive(n, data_plan_frame(job.id, plan.message_for(n)));
  save(job);
}

// A node registering again (the same process on a new session, or an adopting controller's
// first contact) lost what its old session had queued: the plan, if it may still wait for it.
void TrainingJobs::resend_data_plan(Member& m) {
  for (JobRecord* running : running_jobs()) {
    const JobRecord& job = *running;
    if (job.data_plan.is_null() || job.finished() || !listed(job.nodes, m.name) ||
        (job.dropped(m.name) && !listed(job.rejoining, m.name)))
      continue;
    send_kept_plan(job, m);
  }
}

void TrainingJobs::send_kept_plan(const JobRecord& job, Member& m) {
  m.send(data_plan_frame(job.id, plan_message_for(job.data_plan, m.name)));
}

}  // namespace dtrain::daemon
