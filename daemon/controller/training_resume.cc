// A job goes on from its consistent checkpoint (docs/architecture/daemon.md, "Resume"): after the
// whole cluster went down (every node that came back restarted; those that did not are left out),
// or by hand (`dtrain-submit resume JOB`) after it failed or was cancelled. Each node that holds
// the checkpoint is sent the job again with `resume_epoch`, finds its own copy of it
// (core::find_epoch_checkpoint) and starts there; the replicas agree at epoch ends, so any
// subset of the holders can go on, the shards spread over the members it has now.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "daemon/controller/training_jobs.h"

namespace dtrain::daemon {

// Holders of the job's consistent checkpoint that are registered now as the machine that wrote
// it (same node id), in their old rank order.
std::vector<std::string> TrainingJobs::checkpoint_holders(const JobRecord& job,
                                                        int64_t epoch) const {
  std::vector<std::string> out;
  for (const Json& member : job.members) {
    if (!member.is_object()) continue;
    const std::string name = member.value("name", std::string());
    auto cp = job.checkpoints.find(name);
    const Member* m = members_.find(name);
    if (cp == job.checkpoints.end() || cp->second < epoch || !m || !m->alive ||
        m->id != member.value("id", 0u))
      continue;
    out.push_back(name);
  }
  return out;
}

void TrainingJobs::resume_on(JobRecord& job, const std::vector<std::string>& names,
                           int64_t epoch) {
  Json members = Json::array();
  for (const Json& old : job.members) {
    const std::string name = old.value("name", std::string());
    if (!listed(names, name)) continue;
    const Member& m = *members_.find(name);
    Json now = old;  // its place (workers, device) as before; where it listens as it is now
    now["address"] = m.address;
    now["port"] = m.data_port;
    now["boot"] = m.boot_id;
    members.push_back(now);
  }
  std::vector<std::string> left_out;
  for (const std::string& n : job.nodes)
    if (!listed(names, n)) left_out.push_back(n);
  job.members = members;
  job.nodes = names;
  if (job.min_nodes > 0) {  // elastic: vacant slots again for the nodes it may still take
    try {
      add_vacant_slots(job, job.spec().training);
    } catch (const core::UserError&) {
    }
  }
  for (auto it = job.checkpoints.begin(); it != job.checkpoints.end();)
    it = listed(names, it->first) ? std::next(it) : job.checkpoints.erase(it);
  forget_run(job);
  job.state = JobState::kRunning;
  scheduler_.set_running(job.id, job.owner);
  std::string line = "the job resumes from its checkpoint at the end of epoch " +
                     std::to_string(epoch) + " on " + std::to_string(names.size()) + " nodes";
  if (!left_out.empty()) {
    line += " (without";
    for (const std::string& n : left_out) line += " " + n;
    line += ": not back, or without the checkpoint)";
  }
  job.add_log(line);
  spdlog::info("controller: job {}: {}", job_id_text(job.id), line);
  std::vector<StartMessage> starts;
  for (size_t rank = 0; rank < names.size(); ++rank) {
    starts.push_back(start_message(job, rank));
    starts.back().resume_epoch = epoch;
  }
  try {
    offer_nccl(job, job.spec().training, starts);
  } catch (const core::UserError&) {  // a record of another release: its nodes sum over the mesh
  }
  for (size_t rank = 0; rank < names.size(); ++rank)
    send_start(job, members_.entry(names[rank]), std::move(starts[rank]));
  save(job);
}

// What the stopped run left: its membership changes, results and failures. From here on a
// running job like any other (adopted on a restart).
void TrainingJobs::forget_run(JobRecord& job) {
  job.lost_nodes.clear();
  job.rejoined_nodes.clear();
  job.joined_nodes.clear();
  job.rejoining.clear();
  job.unannounced.clear();
  job.data_plan = Json();  // on fewer nodes: the nodes list their files again, a new deal
  job.shard_lists.clear();
  job.adopted.clear();
  job.restarted.clear();
  job.adopting = false;
  job.progress.clear();
  job.results.clear();
  job.failures.clear();
  job.result = Json::object();
  job.error.clear();
  job.fix.clear();
  job.cancel_requested = false;
  job.finished_at = 0;
  job.resume_epoch = -1;
}

// At the end of an adoption: no node still trains the job and none finished it, and some came
// back as new processes (the whole cluster went down, or all but the ones that stay away). The
// job goes on from its consistent checkpoint on those that came back.
bool TrainingJobs::resume_from_checkpoint(JobRecord& job) {
  const int64_t epoch = job.consistent_checkpoint();
  if (epoch < 0 || !job.adopted.empty() || !job.results.empty() || !job.failures.empty() ||
      job.restarted.empty())
    return false;
  std::vector<std::string> back;
  for (const std::string& n : checkpoint_holders(job, epoch))
    if (listed(job.restarted, n)) back.push_back(n);
  if (back.empty()) return false;
  resume_on(job, back, epoch);
  return true;
}

// `dtrain-submit resume JOB`: a failed or cancelled job with a consistent checkpoint is queued
// again; it starts (start_next) on the holders of its checkpoint that are registered then.
Json TrainingJobs::resume_request(JobRecord& job, const std::string& by) {
  const std::string id = job_id_text(job.id);
  if (!job.finished())
    throw core::UserError("job " + id + " is " + job_state_name(job.state) +
                              "; only a failed or cancelled job can be resumed",
                          "wait for it to end, or cancel it first "
                          "(dtrain-submit cancel " + id + ")");
  if (job.state == JobState::kSucceeded)
    throw core::UserError("job " + id + " succeeded; there is nothing to resume",
                          "to train further, submit a job with model.init_from: its model");
  const int64_t epoch = job.consistent_checkpoint();
  if (epoch < 0)
    throw core::UserError("job " + id + " has no consistent checkpoint (no epoch end that every "
                          "node wrote)", "set output.checkpoint_every and submit it again");
  job.resume_epoch = epoch;
  job.state = JobState::kQueued;
  job.cancel_requested = false;
  job.add_log("resume requested by " + by + ": from the checkpoint at the end of epoch " +
              std::to_string(epoch));
  scheduler_.enqueue(job.id, job.owner);
  save(job);
  start_next_();
  return job.to_json();
}

// Whether `node` is free of other jobs for the job's place on it (its members entry): the whole
// node, or its share with the same GPUs.
bool TrainingJobs::has_room(const JobRecord& job, const std::string& node,
                            const NodeUse& use) const {
  const Member* m = members_.find(node);
  if (!m) return false;
  for (const Json& member : job.members)
    if (member.is_object() && member.value("name", std::string()) == node)
      return use.room_for(m->offer(), hold_of(job.id, member));
  return !use.held(node);
}

// start_next for a queued resume: it waits until a holder of the checkpoint is registered and
// free of other jobs (for its place there).
StartOutcome TrainingJobs::start_resumed(JobRecord& job, const NodeUse& use) {
  std::vector<std::string> holders = checkpoint_holders(job, job.resume_epoch);
  const size_t registered = holders.size();
  holders.erase(std::remove_if(holders.begin(), holders.end(),
                               [&](const std::string& n) { return !has_room(job, n, use); }),
                holders.end());
  const size_t needed = size_t(std::max<int64_t>(1, job.min_nodes));  // elastic: its minimum
  if (const int64_t allowance = owner_allowance(job, use); allowance >= 0) {
    if (allowance < int64_t(needed)) return wait_for_limit(job, allowance);
    if (int64_t(holders.size()) > allowance) holders.resize(size_t(allowance));
  }
  if (holders.size() < needed) {
    std::string line = "waiting for " + std::to_string(needed) + " nodes that hold its "
                       "checkpoint of epoch " + std::to_string(job.resume_epoch) + " (";
    bool first = true;
    for (const auto& [n, e] : job.checkpoints) {
      if (e < job.resume_epoch) continue;
      line += (first ? "" : ", ") + n;
      first = false;
    }
    line += registered > holders.size() ? "; some busy with other jobs)" : ")";
    job.add_log_once(line);
    return registered >= needed ? StartOutcome::kWaitsForBusy : StartOutcome::kWaits;
  }
  scheduler_.drop(job.id);
  resume_on(job, holders, job.resume_epoch);
  return StartOutcome::kStarted;
}

}  // namespace dtrain::daemon
