#include "daemon/controller/task_jobs.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/util/error.h"
#include "daemon/controller/task_request.h"
#include "daemon/controller/task_results.h"
#include "daemon/protocol/node_reports_json.h"

namespace dtrain::daemon {
namespace {

constexpr uint32_t kPartsPerNode = 4;
constexpr size_t kMaxUnfinishedTasks = 8;

}  // namespace

TaskJobs::TaskJobs(const DaemonConfig& config, JobStore& store, Membership& members,
                   Scheduler& scheduler, std::function<void(JobRecord&)> closed)
    : config_(config),
      store_(store),
      members_(members),
      scheduler_(scheduler),
      closed_(std::move(closed)) {}

std::vector<JobRecord*> TaskJobs::running_tasks() {
  std::vector<JobRecord*> out;
  for (uint64_t id : scheduler_.running_ids())
    if (JobRecord* job = store_.find(id); job && job->is_task()) out.push_back(job);
  return out;
}

// Each task holds its model in memory until it ends: a bounded number of them.
void TaskJobs::check_room() const {
  const size_t unfinished = store_.unfinished_tasks();
  if (unfinished >= kMaxUnfinishedTasks)
    throw core::UserError(std::to_string(unfinished) + " evaluation or inference jobs are queued "
                              "or running already",
                          "wait for them (dtrain-submit status) or cancel some");
}

JobRecord TaskJobs::accept(const TaskRequest& request, SharedBytes model) const {
  if (!model || model->empty())
    throw core::UserError("the task brings no model", "use dtrain-submit eval|infer MODEL --cluster");
  TaskLimits limits{config_.task_outputs, config_.data_dir, 0};
  limits.alive_nodes = members_.alive_count();
  const Json checked = checked_task_request(request, limits);
  check_room();
  JobRecord job;
  job.name = checked["name"];
  job.mode = checked["task"];
  job.task = parse_task_kind(job.mode);
  job.task_request = checked;
  job.model = std::move(model);  // as received: the record's one copy (each frame holds its own)
  job.add_log("submitted (" + job.mode + " of " +
              checked.value("path", checked.value("shards", "")) + ", a model of " +
              std::to_string(job.model->size()) + " bytes)");
  return job;
}

TaskMessage TaskJobs::task_message(const JobRecord& job, std::vector<uint32_t> parts,
                                   const std::string& node) const {
  TaskMessage t = task_fields(job.task_request);  // its model: task_frame's, from the record
  if (!t.shards.empty())  // node-local: each part is a file of the node's own
    for (uint32_t p : parts) {
      const auto& holders = job.part_holders.at(p);
      t.part_files.push_back(holders.count(node) ? holders.at(node) : std::string());
    }
  t.parts = std::move(parts);
  t.part_count = job.part_count;
  return t;
}

void TaskJobs::send_parts(JobRecord& job, Member& m, const std::vector<uint32_t>& parts) {
  m.send(task_frame(job.id, task_message(job, parts, m.name), *job.model));
}

StartOutcome TaskJobs::start(JobRecord& job, const NodeUse& use) {
  const int64_t wanted = job.task_request.value("nodes", int64_t(0));
  const int64_t allowance = owner_allowance(config_.limits, job.owner, use);
  NodeChoice choice;
  if (allowance >= 0 && allowance < std::max<int64_t>(1, wanted))
    choice.waiting = "waiting: " + job.owner + "'s running jobs hold every node they may "
                     "(limits in the controller's dtraind.yaml)";
  else
    choice = choose_task_nodes(wanted, members_, use.busy());
  if (!choice.waiting.empty()) {
    job.add_log_once(choice.waiting);
    return choice.waits_for_busy ? StartOutcome::kWaitsForBusy : StartOutcome::kWaits;
  }
  if (allowance >= 0 && int64_t(choice.nodes.size()) > allowance)
    choice.nodes.resize(size_t(allowance));  // every free node: as many as the limit leaves
  if (!give_task_folder(job)) return StartOutcome::kEnded;
  const std::vector<Member*>& nodes = choice.nodes;
  scheduler_.start(job.id);
  job.state = JobState::kRunning;
  job.started_at = unix_now();
  for (Member* m : nodes) job.nodes.push_back(m->name);
  if (job.task_request.contains("shards")) {  // node-local: parts once every node has listed
    for (Member* m : nodes) send_parts(job, *m, {});
    job.add_log("started on " + std::to_string(nodes.size()) + " nodes; each lists the files " +
                job.task_request.value("shards", "") + " matches there");
    save(job);
    return StartOutcome::kStarted;
  }
  job.part_count = std::min<uint32_t>(kMaxTaskParts, kPartsPerNode * uint32_t(nodes.size()));
  std::vector<uint32_t> parts(job.part_count);
  for (uint32_t p = 0; p < job.part_count; ++p) parts[p] = p;
  deal_parts(job, nodes, parts);
  job.add_log("started on " + std::to_string(nodes.size()) + " nodes, " +
              std::to_string(job.part_count) + " parts");
  spdlog::info("controller: {} job {} ({}) started on {} nodes", job.mode, job_id_text(job.id),
               job.name, nodes.size());
  save(job);
  return StartOutcome::kStarted;
}

// Its outputs into a folder of its own, made as it starts (task_request.h); false when it could
// not be made: the job failed, naming the folder.
bool TaskJobs::give_task_folder(JobRecord& job) {
  try {
    job.task_request = with_task_folder(job.task_request, job_id_text(job.id));
    return true;
  } catch (const core::UserError& e) {
    scheduler_.drop(job.id);
    finish(job, JobState::kFailed, e.what_happened(), e.fix());
    return false;
  }
}

void TaskJobs::on_report(JobRecord& job, Member& m, const JobMessageIn& in) {
  if (in.kind == JobKind::Log) {
    job.add_log(m.name + ": " + std::get<LogReport>(in.report).line);
  } else if (in.kind == JobKind::Failed) {
    const FailedReport& failed = std::get<FailedReport>(in.report);
    finish(job, JobState::kFailed, m.name + ": " + failed.error, failed.fix);
  } else if (in.kind == JobKind::Shards && !job.finished()) {
    on_shards(job, m, std::get<ShardsReport>(in.report));
  } else if (in.kind == JobKind::PartDone && !job.finished()) {
    on_part_done(job, m, std::get<PartDoneReport>(in.report));
  }
}

void TaskJobs::on_part_done(JobRecord& job, Member& m, const PartDoneReport& done) {
  if (done.part_index >= job.part_count) {
    spdlog::warn("controller: {} sent a PartDone for part {} of job {}, which has {}: ignored",
                 m.name, done.part_index, job_id_text(job.id), job.part_count);
    return;
  }
  const uint32_t part = done.part_index;
  // A node speaks for the parts it holds now (a lost node's late report is not taken).
  if (job.part_owner[part] != m.name || job.part_results.count(part)) return;
  const Json body = part_done_json(done);  // as the job record keeps it
  const auto metrics = job.task_request.value("metrics", std::vector<std::string>{});
  const bool roc = std::find(metrics.begin(), metrics.end(), "roc") != metrics.end();
  if (const std::string wrong = check_part_done(job.task, body, part,
                                                job.task_request.value("output_dir", ""), roc);
      !wrong.empty())
    return finish(job, JobState::kFailed,
                  m.name + " reported part " + std::to_string(part) + " with " + wrong,
                  "run the same dtrain release on every node");
  // Node-local: the file it read must be the one it listed (not changed meanwhile).
  const int64_t examples = body.value("examples", int64_t(-1));
  if (!job.part_examples.empty() && examples != job.part_examples[part])
    return finish(job, JobState::kFailed,
                  m.name + " evaluated " + std::to_string(examples) + " examples for part " +
                      std::to_string(part + 1) + ", whose file held " +
                      std::to_string(job.part_examples[part]) + " when it was listed",
                  "leave the --shards files as they are while an evaluation runs, and submit "
                  "again");
  job.part_results[part] = body;
  job.add_log(m.name + ": part " + std::to_string(part + 1) + " of " +
              std::to_string(job.part_count) + " done (" +
              std::to_string(body.value("examples", int64_t(0))) + " examples)");
  if (job.part_results.size() == job.part_count) finish(job, JobState::kSucceeded, "", "");
}

void TaskJobs::drop(JobRecord& job, const std::string& name, const std::string& why) {
  if (!listed(job.nodes, name)) return;
  if (job.results.count(name) || job.failures.count(name)) return;
  if (!listed(job.lost_nodes, name)) job.lost_nodes.push_back(name);
  job.add_log("node " + name + " lost (" + why + ")");
  reassign_parts(job, name);
  save(job);
}

void TaskJobs::reassign_parts(JobRecord& job, const std::string& lost) {
  std::vector<Member*> live;
  for (const std::string& n : job.nodes)
    if (Member* m = members_.find(n); n != lost && !job.dropped(n) && m && m->alive)
      live.push_back(m);
  std::vector<uint32_t> orphaned;
  for (const auto& [part, owner] : job.part_owner)
    if (owner == lost && !job.part_results.count(part)) orphaned.push_back(part);
  if (job.task_request.contains("shards")) {
    if (job.part_count == 0) plan_parts_if_ready(job);  // it may be the list awaited
    else reassign_shard_parts(job, orphaned, lost);
    return;
  }
  if (orphaned.empty()) return;
  if (live.empty())
    return finish(job, JobState::kFailed, "every node of the job was lost",
                  "check the nodes' logs (journalctl -u dtraind) and submit again");
  const std::vector<std::vector<uint32_t>> shares = deal_parts(job, live, orphaned);
  for (size_t i = 0; i < live.size(); ++i)
    if (!shares[i].empty())
      job.add_log(std::to_string(shares[i].size()) + " of " + lost + "'s parts go to " +
                  live[i]->name);
}

std::vector<std::vector<uint32_t>> TaskJobs::deal_parts(JobRecord& job,
                                                        const std::vector<Member*>& nodes,
                                                        const std::vector<uint32_t>& parts) {
  std::vector<std::vector<uint32_t>> shares(nodes.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    shares[i % nodes.size()].push_back(parts[i]);
    job.part_owner[parts[i]] = nodes[i % nodes.size()]->name;
  }
  for (size_t i = 0; i < nodes.size(); ++i)
    if (!shares[i].empty()) send_parts(job, *nodes[i], shares[i]);
  return shares;
}

void TaskJobs::on_registered(Member& m, const std::vector<uint64_t>& running_jobs) {
  for (JobRecord* job : running_tasks()) on_registered_to(*job, m, running_jobs);
}

void TaskJobs::on_registered_to(JobRecord& job, Member& m,
                                const std::vector<uint64_t>& running_jobs) {
  if (job.finished() || !listed(job.nodes, m.name)) return;
  if (job.dropped(m.name)) {
    if (std::find(running_jobs.begin(), running_jobs.end(), job.id) == running_jobs.end()) return;
    m.send(cancel_frame(job.id));
    job.add_log("node " + m.name + " is back after the job dropped it; its parts are done by "
                "the others, so it was told to stop");
    save(job);
    return;
  }
  if (job.task_request.contains("shards") && job.part_count == 0) {
    // Its list may have died with the old session: it is asked again (a runner that has
    // listed already sends its list again).
    if (!job.shard_lists.count(m.name)) send_parts(job, m, {});
    return;
  }
  std::vector<uint32_t> parts;
  for (const auto& [part, owner] : job.part_owner)
    if (owner == m.name && !job.part_results.count(part)) parts.push_back(part);
  if (parts.empty()) return;
  send_parts(job, m, parts);
  job.add_log(m.name + " registered again: sent its " + std::to_string(parts.size()) +
              " unfinished parts again");
}

// The parts merged into the job's result: an evaluation's counts, or the inference's part files
// joined in key order. A merge that fails fails the job.
void TaskJobs::merge(JobRecord& job) {
  try {
    job.result = job.task == TaskKind::Eval
                     ? merge_eval_parts(job.part_results, job.task_request)
                     : merge_infer_parts(job.part_results,
                                         job.task_request.value("output_dir", ""),
                                         job.task_request.value("keep_parts", false));
    job.result["parts"] = job.part_count;
  } catch (const std::exception& e) {
    job.state = JobState::kFailed;
    job.error = e.what();
    if (const auto* u = dynamic_cast<const core::UserError*>(&e)) {
      job.error = u->what_happened();
      job.fix = u->fix();
    }
  }
}

void TaskJobs::finish(JobRecord& job, JobState state, const std::string& error,
                      const std::string& fix) {
  if (job.finished()) return;
  job.state = state;
  job.error = error;
  job.fix = fix;
  if (state == JobState::kSucceeded) merge(job);
  // What a failed inference's parts wrote is cleaned up.
  if (job.task == TaskKind::Infer && job.state != JobState::kSucceeded)
    remove_part_files(job.part_results, job.task_request.value("output_dir", ""));
  // The merge held the lock (a join of part files can take a while): nodes whose heartbeats
  // queued up meanwhile were not silent.
  members_.heard_all();
  // Every node's runner waits for more parts until told: the job is over.
  for (const std::string& n : job.nodes) members_.send_if_alive(n, cancel_frame(job.id));
  job.model.reset();
  job.finished_at = unix_now();
  closed_(job);
}

}  // namespace dtrain::daemon
