#include "daemon/controller/training_jobs.h"

#include <sodium.h>
#include <spdlog/spdlog.h>

#include "daemon/controller/placement.h"

namespace dtrain::daemon {

TrainingJobs::TrainingJobs(const DaemonConfig& config, JobStore& store, Membership& members,
                           Scheduler& scheduler, StatsStore& stats,
                           std::function<void(JobRecord&)> closed,
                           std::function<void()> start_next)
    : config_(config),
      store_(store),
      members_(members),
      scheduler_(scheduler),
      stats_(stats),
      closed_(std::move(closed)),
      start_next_(std::move(start_next)) {}

JobRecord* TrainingJobs::running_job() {
  const uint64_t id = scheduler_.running();
  JobRecord* job = id ? store_.find(id) : nullptr;
  return job && !job->is_task() ? job : nullptr;
}

void TrainingJobs::fail_unparsable(JobRecord& job, const core::UserError& e) {
  scheduler_.drop(job.id);
  job.state = JobState::kFailed;
  job.error = e.what_happened();
  job.fix = e.fix();
  job.finished_at = unix_now();
  job.add_log("failed before it started: " + job.error);
  save(job);
  start_next_();
}

void TrainingJobs::start(JobRecord& job) {
  core::JobSpec spec;
  try {
    spec = job.spec();
  } catch (const core::UserError& e) {
    // Checked at submit; a record from another release may still not parse. That job fails,
    // the queue goes on.
    return fail_unparsable(job, e);
  }
  if (job.resume_epoch >= 0) {
    start_resumed(job);
    return;
  }
  const NodeChoice choice = choose_training_nodes(spec.training, members_);
  if (!choice.waiting.empty()) {
    if (job.log.empty() || job.log.back().find(choice.waiting) == std::string::npos)
      job.add_log(choice.waiting);
    return;
  }
  scheduler_.start(job.id);
  job.state = JobState::kRunning;
  job.started_at = unix_now();
  place(job, spec, choice.nodes);
  for (size_t rank = 0; rank < choice.nodes.size(); ++rank)
    send_start(job, *choice.nodes[rank], start_message(job, rank));
  job.add_log("started on " + std::to_string(choice.nodes.size()) + " nodes");
  spdlog::info("controller: job {} ({}) started on {} nodes", job_id_text(job.id), job.name,
               choice.nodes.size());
  save(job);
}

// Where each member runs (its workers, on its CPU or GPUs), kept in the record: a restarted
// controller and a rejoining node are sent the same.
void TrainingJobs::place(JobRecord& job, const core::JobSpec& spec,
                         const std::vector<Member*>& nodes) {
  Json members = Json::array();
  for (Member* m : nodes) {
    const NodePlacement at = place_on(spec.training, m->offer());
    members.push_back({{"id", m->id}, {"name", m->name}, {"boot", m->boot_id},
                       {"address", m->address}, {"port", m->data_port},
                       {"workers", at.workers}, {"device", at.gpu ? "gpu" : "cpu"},
                       {"gpus", at.gpus}});
    job.nodes.push_back(m->name);
  }
  job.members = members;
  job.data_plan = Json();  // a resumed job's nodes may differ: they list their files again
  job.shard_lists.clear();
  add_vacant_slots(job, spec.training);
  job.mesh = spec.training.mesh;
}

StartMessage TrainingJobs::start_message(const JobRecord& job, size_t rank) const {
  StartMessage start;
  start.spec = job.spec_text;
  start.base_dir = job.base_dir;
  start.name = job.name;
  start.rank = uint32_t(rank);
  start.mesh = job.mesh;
  start.peer_timeout_ms = config_.peer_timeout_ms;
  for (const Json& j : job.members) {  // the controller's own record of where it placed them
    JobMemberInfo m;
    m.id = j.value("id", 0u);
    m.name = j.value("name", "");
    m.address = j.value("address", "");
    m.port = j.value("port", uint16_t(0));
    m.workers = j.value("workers", 1);
    m.gpu = j.value("device", std::string("cpu")) == "gpu";
    m.gpus = j.value("gpus", std::vector<int>{});
    // Each member's boot as registered now (a member that restarted since the job began has a
    // new one): its peers take datagrams from that boot only.
    const Member* now = members_.find(m.name);
    if (now && now->id == m.id) m.boot = now->boot_id;
    start.members.push_back(std::move(m));
  }
  return start;
}

void TrainingJobs::send_start(JobRecord& job, Member& m, StartMessage start) {
  do randombytes_buf(&start.part, sizeof start.part);
  while (start.part == 0 || start.part >> 53);  // stays exact in JSON readers
  job.parts[m.name] = start.part;
  m.send(start_frame(job.id, start));
}

void TrainingJobs::tell_others(const JobRecord& job, const std::string& except,
                               const std::vector<uint8_t>& frame) {
  for (const std::string& n : job.nodes)
    if (n != except) members_.send_if_alive(n, frame);
}

void TrainingJobs::stop_job(JobRecord& job, const Json& failure) {
  job.failures["controller"] = failure;
  job.cancel_requested = true;
  job.add_log("the job stops: " + failure.value("error", std::string("?")));
  spdlog::warn("controller: job {} stops: {}", job_id_text(job.id),
               failure.value("error", std::string("?")));
  tell_others(job, "", cancel_frame(job.id));
  save(job);
}

void TrainingJobs::cancel(JobRecord& job) { tell_others(job, "", cancel_frame(job.id)); }

void TrainingJobs::on_registered(Member& m, const std::vector<uint64_t>& running_jobs) {
  recall_dropped(m, running_jobs);
  adopt(m, running_jobs);
  offer_rejoin(m);
  offer_join(m);
  resend_data_plan(m);
}

void TrainingJobs::drop(JobRecord& job, const std::string& name, const std::string& why) {
  if (!listed(job.nodes, name)) return;
  if (job.results.count(name) || job.failures.count(name)) return;
  if (!listed(job.lost_nodes, name)) job.lost_nodes.push_back(name);
  stop_rejoining(job, name);
  unlist(job.rejoined_nodes, name);
  job.checkpoints.erase(name);  // back, it reports new ones; its old ones must not hold back
  job.add_log("node " + name + " lost (" + why + "); the job continues on the others");
  below_minimum(job);
  plan_data_if_ready(job);  // it may have been the list the plan waited for
  check_finished(job);
  save(job);
}

}  // namespace dtrain::daemon
