// Lost members coming back (docs/architecture/daemon.md, "Lost and restarted members"): a node the
// running job dropped registers again and is sent the job to rejoin; once its new part is on the
// job's mesh (Attached) the others are told to admit it at their next epoch end.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "daemon/controller/training_jobs.h"

namespace dtrain::daemon {
namespace {

// Whether the job can take a node back (a rejoin): not with early stopping, whose best model
// so far a node back in the job lacks, so it could not end with the same replica.
bool takes_nodes_back(const JobRecord& job) {
  try {
    return !job.spec().training.early_stopping.enabled;
  } catch (const core::UserError&) {
    return false;
  }
}

}  // namespace

// A node the running job dropped came back with its old part still running (it was paused, or
// cut off, for longer than the peer timeout: the same process, the same boot). It is taken back
// with a live replica (offer_rejoin; the node stops its old part for the new one), or, by a job
// that cannot take nodes back, told to stop its part.
void TrainingJobs::recall_dropped(Member& m, const std::vector<uint64_t>& running) {
  for (JobRecord* job : running_jobs()) recall_dropped_from(*job, m, running);
}

void TrainingJobs::recall_dropped_from(JobRecord& dropping, Member& m,
                                       const std::vector<uint64_t>& running) {
  JobRecord* job = &dropping;
  if (std::find(running.begin(), running.end(), job->id) == running.end()) return;
  if (!job->dropped(m.name) || listed(job->rejoining, m.name)) return;
  spdlog::warn("controller: node {} is back and still trains job {}, which dropped it", m.name,
               job_id_text(job->id));
  if (takes_nodes_back(*job)) {
    job->add_log("node " + m.name + " is back after the job dropped it; it is taken back with a "
                 "live replica");
    return;
  }
  m.send(cancel_frame(job->id));
  job->add_log("node " + m.name + " is back after the job dropped it; a job with early stopping "
               "does not take nodes back, so it was told to stop its part (dropped)");
  save(*job);
}

void TrainingJobs::offer_rejoin(Member& m) {
  for (JobRecord* job : running_jobs()) offer_rejoin_to(*job, m);
}

// A node another job took meanwhile (the whole node, or what this job's share needs) stays with
// that one.
void TrainingJobs::offer_rejoin_to(JobRecord& job, Member& m) {
  if (!job.dropped(m.name) || listed(job.rejoining, m.name) || job.results.count(m.name) ||
      job.failures.count(m.name) || job.cancel_requested || !takes_nodes_back(job))
    return;
  const NodeUse use = node_use_now();
  if (!has_room(job, m.name, use) || owner_allowance(job, use) == 0) return;
  int rank = -1;
  std::vector<uint32_t> lost;
  for (size_t i = 0; i < job.members.size(); ++i) {
    const Json& member = job.members[i];
    const std::string name = member.value("name", "");
    if (name == m.name) {
      if (member.value("id", 0u) != m.id) return;  // another machine under the same name
      rank = int(i);
    } else if (job.dropped(name)) {
      lost.push_back(member.value("id", 0u));
    }
  }
  if (rank < 0) return;
  StartMessage start = start_message(job, size_t(rank));
  start.rejoin = true;
  start.lost = lost;
  send_start(job, m, start);
  job.unannounced[m.name] = rejoin_frame(job.id, {m.id, m.boot_id});
  job.rejoining.push_back(m.name);
  job.add_log("node " + m.name + " is back; it rejoins at the next epoch end");
}

// The rejoining (or joining) node's new part takes the job's datagrams now: the others may
// admit it at their next epoch end and send it their parameters.
void TrainingJobs::announce_rejoin(JobRecord& job, const std::string& name) {
  auto it = job.unannounced.find(name);
  if (it == job.unannounced.end()) return;
  tell_others(job, name, it->second);
  job.unannounced.erase(it);
}

// It is no longer waiting to be admitted (admitted, failed, or dropped).
void TrainingJobs::stop_rejoining(JobRecord& job, const std::string& name) {
  unlist(job.rejoining, name);
  job.unannounced.erase(name);
}

}  // namespace dtrain::daemon
