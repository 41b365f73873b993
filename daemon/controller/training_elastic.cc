// Elastic membership (docs/architecture/daemon.md, "Elastic membership"): a job with
// `training.nodes: {min: M, max: N}` starts once M nodes are there and gets a vacant slot (a member
// entry without an address, id kFirstSlotId + k) for each node it may still take. Its workers and
// shards are fixed from the start; the live nodes do the vacant slots' shards at every epoch
// end (the takeover of a lost node's minibatches). A node that registers later takes the
// first vacant slot: it is sent the job to join like a restarted member rejoins, the others
// learn where it is (a Rejoin with its member entry), and it is admitted at the next epoch end
// with a live node's parameters; from then on it trains the slot's shards. The job fails when
// fewer than M of its nodes are live.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "daemon/controller/training_jobs.h"

namespace dtrain::daemon {

void TrainingJobs::add_vacant_slots(JobRecord& job, const core::TrainingSpec& training) {
  if (training.nodes_max <= 0) return;
  job.min_nodes = training.nodes;
  int workers = int(training.workers_per_node);
  if (workers <= 0) {  // auto: as few as any starting node got, so that any newcomer has them
    workers = 1 << 20;
    for (const Json& m : job.members) workers = std::min(workers, m.value("workers", 1));
  }
  const size_t slots = std::min<size_t>(
      kMaxSlots, size_t(std::max<int64_t>(0, training.nodes_max - int64_t(job.nodes.size()))));
  for (size_t k = 0; k < slots; ++k)
    job.members.push_back({{"id", kFirstSlotId + uint32_t(k)},
                           {"name", "slot-" + std::to_string(k + 1)},
                           {"address", ""}, {"port", 0}, {"workers", workers},
                           {"device", "cpu"}, {"gpus", Json::array()}});
  if (slots > 0)
    job.add_log("elastic: " + std::to_string(job.nodes.size()) + " nodes now, up to " +
                std::to_string(job.nodes.size() + slots) + "; the shards of the " +
                std::to_string(slots) + " vacant slots are done by the live nodes until a node "
                "takes them");
}

void TrainingJobs::offer_join(Member& m) {
  if (!m.alive) return;
  for (JobRecord* job : running_jobs())
    if (offer_join_to(*job, m)) return;
}

// True when `m` took one of the job's vacant slots.
bool TrainingJobs::offer_join_to(JobRecord& job, Member& m) {
  if (job.finished() || job.cancel_requested || job.adopting || listed(job.nodes, m.name))
    return false;
  size_t slot = job.members.size();
  for (size_t i = 0; i < job.members.size() && slot == job.members.size(); ++i)
    if (job.members[i].value("address", std::string()).empty()) slot = i;
  if (slot == job.members.size()) return false;  // not elastic, or every slot taken
  if (owner_allowance(job, node_use_now()) == 0) return false;  // its owner's node limit
  core::JobSpec spec;
  try {
    spec = job.spec();
  } catch (const core::UserError&) {
    return false;  // it parsed when the job started; a record from another release: no joins
  }
  // The node must have room for the job beside what runs there (a share beside shares; a job of
  // whole nodes on a node no job holds).
  const NodeUse use = node_use_now();
  if (!node_eligible(spec.training, m.offer()) ||
      !use.fits(m.offer(), demand_of(spec.training)))
    return false;
  Json& entry = job.members[slot];
  const uint32_t slot_id = entry.value("id", 0u);
  const std::string slot_name = entry.value("name", std::string("a slot"));
  const int workers = entry.value("workers", 1);
  const NodePlacement place = place_on(
      spec.training, spec.training.shares_nodes() ? use.free_part(m.offer()) : m.offer());
  entry = {{"id", m.id}, {"name", m.name}, {"boot", m.boot_id}, {"address", m.address},
           {"port", m.data_port}, {"workers", workers}, {"device", place.gpu ? "gpu" : "cpu"},
           {"gpus", place.gpus}, {"cores", place.cores}, {"slot", slot_id}};
  job.nodes.push_back(m.name);
  job.rejoining.push_back(m.name);  // not waited for, nor counted, until it is admitted
  StartMessage start = start_message(job, slot);
  start.rejoin = true;
  start.joining = true;
  for (const Json& other : job.members)
    if (job.dropped(other.value("name", std::string()))) start.lost.push_back(other.value("id", 0u));
  send_start(job, m, start);
  const RejoinMessage join{m.id, m.boot_id, start.members[slot], slot_id};
  job.unannounced[m.name] = rejoin_frame(job.id, join);  // told once it is on the mesh
  job.add_log("node " + m.name + " joins the job in its vacant " + slot_name + " (" +
              std::to_string(workers) + (workers == 1 ? " worker" : " workers") +
              "); it is admitted at the next epoch end");
  spdlog::info("controller: node {} joins job {}", m.name, job_id_text(job.id));
  save(job);
  return true;
}

bool TrainingJobs::below_minimum(JobRecord& job) {
  if (job.min_nodes <= 0 || job.finished() || job.cancel_requested) return false;
  int64_t live = 0;
  for (const std::string& n : job.nodes)
    live += !job.dropped(n) && !listed(job.rejoining, n);
  if (live >= job.min_nodes) return false;
  const std::string id = job_id_text(job.id);
  stop_job(job, {{"error", "only " + std::to_string(live) + " of the job's nodes are live, fewer "
                           "than its minimum of " + std::to_string(job.min_nodes) +
                           " (training.nodes.min)"},
                 {"fix", "start dtraind on more nodes, then dtrain-submit resume " + id +
                         " (from its checkpoint); or lower training.nodes.min"}});
  return true;
}

}  // namespace dtrain::daemon
