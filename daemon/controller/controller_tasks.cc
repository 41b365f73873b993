// Cluster evaluation and inference jobs (daemon/README.md, "Evaluation and inference jobs"):
// `dtrain-submit eval|infer MODEL --cluster` ships a model; the controller splits the data
// into parts of whole batches, gives each live node its share, takes each PartDone, gives a
// lost node's parts to the others, and joins the parts in part order at the end.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/util/error.h"
#include "daemon/controller/controller.h"
#include "daemon/controller/task_request.h"
#include "daemon/controller/task_results.h"

namespace dtrain::daemon {
namespace {

constexpr uint32_t kPartsPerNode = 4;
constexpr size_t kMaxUnfinishedTasks = 8;

}  // namespace

Json Controller::submit_task(const TaskRequest& request, const std::vector<uint8_t>& model) {
  if (model.empty())
    throw core::UserError("the task brings no model", "use dtrain-submit eval|infer MODEL --cluster");
  TaskLimits limits{config_.task_outputs, config_.data_dir, 0};
  for (const auto& [name, m] : members_) limits.alive_nodes += m.alive;
  const Json checked = checked_task_request(request, limits);
  // Each holds its model in memory until it ends: a bounded number of them.
  size_t unfinished = 0;
  for (const auto& [id, j] : jobs_) unfinished += !j.task.empty() && !j.finished();
  if (unfinished >= kMaxUnfinishedTasks)
    throw core::UserError(std::to_string(unfinished) + " evaluation or inference jobs are queued "
                              "or running already",
                          "wait for them (dtrain-submit status) or cancel some");
  JobRecord job;
  job.name = checked["name"];
  job.task = job.mode = checked["task"];
  job.task_request = checked;
  job.model = std::make_shared<const std::vector<uint8_t>>(model);
  job.add_log("submitted (" + job.task + " of " + checked.value("path", checked.value("shards", "")) + ", a model of " +
              std::to_string(model.size()) + " bytes)");
  return enqueue(std::move(job));
}

TaskMessage Controller::task_message(const JobRecord& job, std::vector<uint32_t> parts,
                                     const std::string& node) const {
  TaskMessage t = task_fields(job.task_request);
  t.model = *job.model;
  if (!t.shards.empty())  // node-local: each part is a file of the node's own
    for (uint32_t p : parts) {
      const auto& holders = job.part_holders.at(p);
      t.part_files.push_back(holders.count(node) ? holders.at(node) : std::string());
    }
  t.parts = std::move(parts);
  t.part_count = job.part_count;
  return t;
}

void Controller::start_task(JobRecord& job) {
  std::vector<Member*> alive;
  for (auto& [name, m] : members_)
    if (m.alive) alive.push_back(&m);
  std::sort(alive.begin(), alive.end(), [](Member* a, Member* b) { return a->id < b->id; });
  const int64_t wanted = job.task_request.value("nodes", int64_t(0));
  if (alive.empty() || (wanted > 0 && int64_t(alive.size()) < wanted)) {
    const std::string line = "waiting for " + std::to_string(std::max<int64_t>(1, wanted)) +
                             " nodes (" + std::to_string(alive.size()) + " registered)";
    if (job.log.empty() || job.log.back().find(line) == std::string::npos) job.add_log(line);
    return;
  }
  if (wanted > 0) alive.resize(size_t(wanted));
  queue_.pop_front();
  running_ = job.id;
  job.state = JobState::kRunning;
  job.started_at = unix_now();
  for (Member* m : alive) job.nodes.push_back(m->name);
  if (job.task_request.contains("shards")) {  // node-local: parts once every node has listed
    for (Member* m : alive) send_parts(job, *m, {});
    job.add_log("started on " + std::to_string(alive.size()) + " nodes; each lists the files " +
                job.task_request.value("shards", "") + " matches there");
    save(job);
    return;
  }
  job.part_count = std::min<uint32_t>(kMaxTaskParts, kPartsPerNode * uint32_t(alive.size()));
  std::vector<uint32_t> parts(job.part_count);
  for (uint32_t p = 0; p < job.part_count; ++p) parts[p] = p;
  deal_parts(job, alive, parts);
  job.add_log("started on " + std::to_string(alive.size()) + " nodes, " +
              std::to_string(job.part_count) + " parts");
  spdlog::info("controller: {} job {} ({}) started on {} nodes", job.task, job_id_text(job.id),
               job.name, alive.size());
  save(job);
}

void Controller::on_task_report(JobRecord& job, Member& m, const JobMessageIn& in) {
  if (in.kind == JobKind::Log) {
    job.add_log(m.name + ": " + std::get<LogReport>(in.report).line);
  } else if (in.kind == JobKind::Failed) {
    const FailedReport& failed = std::get<FailedReport>(in.report);
    finish_task(job, JobState::kFailed, m.name + ": " + failed.error, failed.fix);
  } else if (in.kind == JobKind::Shards && !job.finished()) {
    on_task_shards(job, m, std::get<ShardsReport>(in.report));
  } else if (in.kind == JobKind::PartDone && !job.finished()) {
    const PartDoneReport& done = std::get<PartDoneReport>(in.report);
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
        !wrong.empty()) {
      finish_task(job, JobState::kFailed,
                  m.name + " reported part " + std::to_string(part) + " with " + wrong,
                  "run the same dtrain release on every node");
      return;
    }
    // Node-local: the file it read must be the one it listed (not changed meanwhile).
    if (!job.part_examples.empty() && body.value("examples", int64_t(-1)) != job.part_examples[part]) {
      finish_task(job, JobState::kFailed,
                  m.name + " evaluated " + std::to_string(body.value("examples", int64_t(-1))) +
                      " examples for part " + std::to_string(part + 1) + ", whose file held " +
                      std::to_string(job.part_examples[part]) + " when it was listed",
                  "leave the --shards files as they are while an evaluation runs, and submit "
                  "again");
      return;
    }
    job.part_results[part] = body;
    job.add_log(m.name + ": part " + std::to_string(part + 1) + " of " +
                std::to_string(job.part_count) + " done (" +
                std::to_string(body.value("examples", int64_t(0))) + " examples)");
    if (job.part_results.size() == job.part_count) finish_task(job, JobState::kSucceeded, "", "");
  }
}

void Controller::reassign_parts(JobRecord& job, const std::string& lost) {
  std::vector<Member*> live;
  for (const std::string& n : job.nodes)
    if (n != lost && !job.dropped(n) && members_.count(n) && members_[n].alive)
      live.push_back(&members_[n]);
  std::vector<uint32_t> orphaned;
  for (const auto& [part, owner] : job.part_owner)
    if (owner == lost && !job.part_results.count(part)) orphaned.push_back(part);
  if (job.task_request.contains("shards")) {
    if (job.part_count == 0) plan_task_parts_if_ready(job);  // it may be the list awaited
    else reassign_shard_parts(job, orphaned, lost);
    return;
  }
  if (orphaned.empty()) return;
  if (live.empty()) {
    finish_task(job, JobState::kFailed, "every node of the job was lost",
                "check the nodes' logs (journalctl -u dtraind) and submit again");
    return;
  }
  const std::vector<std::vector<uint32_t>> shares = deal_parts(job, live, orphaned);
  for (size_t i = 0; i < live.size(); ++i)
    if (!shares[i].empty())
      job.add_log(std::to_string(shares[i].size()) + " of " + lost + "'s parts go to " +
                  live[i]->name);
}

std::vector<std::vector<uint32_t>> Controller::deal_parts(JobRecord& job,
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

void Controller::resend_parts(Member& m) {
  if (running_ == 0) return;
  JobRecord& job = jobs_[running_];
  if (job.task.empty() || job.finished() || !listed(job.nodes, m.name) || job.dropped(m.name))
    return;
  if (job.task_request.contains("shards") && job.part_count == 0) {
    // Its list may have died with the old session: it is asked again (a runner that has
    // listed already sends its list again).
    if (!job.shard_lists.count(m.name))
      send_parts(job, m, {});
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

void Controller::finish_task(JobRecord& job, JobState state, const std::string& error,
                             const std::string& fix) {
  if (job.finished()) return;
  job.state = state;
  job.error = error;
  job.fix = fix;
  if (state == JobState::kSucceeded) {
    try {
      job.result = job.task == "eval"
                       ? merge_eval_parts(job.part_results, job.task_request)
                       : merge_infer_parts(job.part_results, job.task_request.value("output_dir", ""),
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
  if (job.task == "infer" && job.state != JobState::kSucceeded)  // what its parts wrote, cleaned up
    remove_part_files(job.part_results, job.task_request.value("output_dir", ""));
  // The merge held the lock (a join of part files can take a while): nodes whose heartbeats
  // queued up meanwhile were not silent.
  for (auto& [name, member] : members_)
    if (member.alive) member.last_heard = std::chrono::steady_clock::now();
  // Every node's runner waits for more parts until told: the job is over.
  for (const std::string& n : job.nodes)
    if (members_.count(n) && members_[n].alive) members_[n].outbox.push_back(cancel_frame(job.id));
  job.model.reset();
  job.finished_at = unix_now();
  close_job(job);
}

}  // namespace dtrain::daemon
