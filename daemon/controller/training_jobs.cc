#include "daemon/controller/training_jobs.h"

#include <sodium.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "daemon/controller/nccl_offer.h"
#include "daemon/controller/placement.h"
#include "daemon/protocol/job_folder.h"

namespace dtrain::daemon {

TrainingJobs::TrainingJobs(const DaemonConfig& config, JobStore& store, Membership& members,
                           Scheduler& scheduler, StatsStore& stats,
                           std::function<void(JobRecord&)> closed,
                           std::function<void()> start_next,
                           std::unique_ptr<NcclIds> nccl_ids)
    : config_(config),
      store_(store),
      members_(members),
      scheduler_(scheduler),
      stats_(stats),
      closed_(std::move(closed)),
      start_next_(std::move(start_next)),
      nccl_ids_(nccl_ids ? std::move(nccl_ids)
                         : std::make_unique<NcclIdProcesses>(config.helper_program)) {}

std::vector<JobRecord*> TrainingJobs::running_jobs() {
  std::vector<JobRecord*> out;
  for (uint64_t id : scheduler_.running_ids())
    if (JobRecord* job = store_.find(id); job && !job->is_task()) out.push_back(job);
  return out;
}

int64_t TrainingJobs::owner_allowance(const JobRecord& job, const NodeUse& use) const {
  return daemon::owner_allowance(config_.limits, job.owner, use);
}

void TrainingJobs::fail_unparsable(JobRecord& job, const core::UserError& e) {
  scheduler_.drop(job.id);
  job.state = JobState::kFailed;
  job.error = e.what_happened();
  job.fix = e.fix();
  job.finished_at = unix_now();
  job.add_log("failed before it started: " + job.error);
  save(job);
}

void TrainingJobs::refuse_over_limits(const core::TrainingSpec& training,
                                      const std::string& owner) const {
  const int64_t limit = limits_of(config_.limits, owner).nodes;
  if (limit > 0 && training.nodes == 0)
    throw core::UserError("the job asks for every node (training.nodes: all); " + owner +
                              "'s jobs may hold " + std::to_string(limit) + " at once",
                          "ask for at most " + std::to_string(limit) +
                              " (training.nodes: N), or ask the operator to raise your limit "
                              "(limits in the controller's dtraind.yaml)");
  if (limit > 0 && training.nodes > limit)
    throw core::UserError("the job needs " + std::to_string(training.nodes) + " nodes; " + owner +
                              "'s jobs may hold " + std::to_string(limit) + " at once",
                          "ask for at most " + std::to_string(limit) +
                              " (training.nodes), or ask the operator to raise your limit "
                              "(limits in the controller's dtraind.yaml)");
}

StartOutcome TrainingJobs::wait_for_limit(JobRecord& job, int64_t allowance) {
  const int64_t limit = limits_of(config_.limits, job.owner).nodes;
  job.add_log_once("waiting: " + job.owner + "'s running jobs hold " +
                    std::to_string(limit - allowance) + " nodes of the " + std::to_string(limit) +
                    " they may (limits in the controller's dtraind.yaml)");
  return StartOutcome::kWaits;
}

StartOutcome TrainingJobs::start(JobRecord& job, const NodeUse& use) {
  core::JobSpec spec;
  try {
    spec = job.spec();
  } catch (const core::UserError& e) {
    // Checked at submit; a record from another release may still not parse. That job fails,
    // the queue goes on.
    fail_unparsable(job, e);
    return StartOutcome::kEnded;
  }
  if (job.resume_epoch >= 0) return start_resumed(job, use);
  // The owner's node limit first: a job it holds back must not hold the queue.
  const int64_t allowance = owner_allowance(job, use);
  if (allowance >= 0 && allowance < std::max<int64_t>(1, spec.training.nodes))
    return wait_for_limit(job, allowance);
  NodeChoice choice = choose_training_nodes(spec.training, members_, use);
  if (!choice.waiting.empty()) {
    job.add_log_once(choice.waiting);
    return choice.waits_for_busy ? StartOutcome::kWaitsForBusy : StartOutcome::kWaits;
  }
  if (allowance >= 0 && int64_t(choice.nodes.size()) > allowance)
    choice.nodes.resize(size_t(allowance));  // elastic: as many as the owner may still take
  scheduler_.start(job.id);
  job.state = JobState::kRunning;
  job.started_at = unix_now();
  place(job, spec, choice.nodes, use);
  job.add_log("started on " + std::to_string(choice.nodes.size()) + " nodes");
  save(job);  // kept before any node hears of it: a fenced-out controller starts nothing
  std::vector<StartMessage> starts;
  for (size_t rank = 0; rank < choice.nodes.size(); ++rank)
    starts.push_back(start_message(job, rank));
  offer_nccl(job, spec.training, starts);
  for (size_t rank = 0; rank < choice.nodes.size(); ++rank)
    send_start(job, *choice.nodes[rank], std::move(starts[rank]));
  spdlog::info("controller: job {} ({}) started on {} nodes", job_id_text(job.id), job.name,
               choice.nodes.size());
  save(job);
  return StartOutcome::kStarted;
}

// Where each member runs (its workers, on its CPU or GPUs, and for a share its cores), kept in
// the record: a restarted controller and a rejoining node are sent the same.
void TrainingJobs::place(JobRecord& job, const core::JobSpec& spec,
                         const std::vector<Member*>& nodes, const NodeUse& use) {
  Json members = Json::array();
  for (Member* m : nodes) {
    const NodeOffer offer = spec.training.shares_nodes() ? use.free_part(m->offer()) : m->offer();
    const NodePlacement at = place_on(spec.training, offer);
    members.push_back({{"id", m->id}, {"name", m->name}, {"boot", m->boot_id},
                       {"address", m->address}, {"port", m->data_port},
                       {"workers", at.workers}, {"device", at.gpu ? "gpu" : "cpu"},
                       {"gpus", at.gpus}, {"cores", at.cores}});
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
  try {  // the job folder its model.init_from names: submit checked that its owner may read it
    if (const auto from = job_of_folder_path(job.spec().model.init_from))
      start.readable_jobs.push_back(*from);
  } catch (const core::UserError&) {  // parsed when it started; a record of another release
  }
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
    m.cores = j.value("cores", 0u);
    // Each member's boot as registered now (a member that restarted since the job began has a
    // new one): its peers take datagrams from that boot only.
    const Member* now = members_.find(m.name);
    if (now && now->id == m.id) m.boot = now->boot_id;
    start.members.push_back(std::move(m));
  }
  return start;
}

void TrainingJobs::offer_nccl(JobRecord& job, const core::TrainingSpec& training,
                              std::vector<StartMessage>& starts) {
  const std::string line = offer_node_collective(training, starts, [&](std::string* why) {
    std::vector<uint8_t> id = nccl_ids_->make(job.id, why);
    // Making it held the lock (a helper process may take up to its wait): nodes whose
    // heartbeats queued up meanwhile were not silent.
    members_.heard_all();
    return id;
  });
  if (!line.empty()) job.add_log(line);
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
