// Node-local evaluation (`dtrain-submit eval MODEL --cluster --shards PATTERN`;
// docs/architecture/daemon.md, "Evaluation and inference jobs"): every node of the job lists the
// packed files it holds; once every live node has, each distinct file becomes a part, evaluated by
// one of its holders (daemon/controller/data_plan.h, make_task_parts). A lost node's parts go to
// other holders of the same files; a file that no live node holds fails the job by name, since the
// merged counts must cover every example.
#include <spdlog/spdlog.h>

#include "daemon/controller/task_jobs.h"

namespace dtrain::daemon {

void TaskJobs::on_shards(JobRecord& job, Member& m, const ShardsReport& list) {
  if (job.part_count != 0) return;  // a list sent again after the plan: it has its parts
  if (!list.error.empty()) {  // the reader found an entry no real node sends
    finish(job, JobState::kFailed,
                m.name + " sent a list of its files the controller cannot read (" + list.error + ")",
                "run the same dtrain release on every node");
    return;
  }
  job.shard_lists[m.name] = list.files;
  plan_parts_if_ready(job);
}

void TaskJobs::plan_parts_if_ready(JobRecord& job) {
  if (job.part_count != 0 || job.finished()) return;
  std::vector<std::string> live;
  for (const std::string& n : job.nodes) {
    if (job.dropped(n) || !members_.alive(n)) continue;
    if (!job.shard_lists.count(n)) return;  // its list is still to come
    live.push_back(n);
  }
  if (live.empty()) {
    finish(job, JobState::kFailed, "every node of the job was lost",
                "check the nodes' logs (journalctl -u dtraind) and submit again");
    return;
  }
  std::map<std::string, std::vector<ShardFile>> lists;  // of the nodes that can still evaluate
  for (const std::string& n : live) lists[n] = job.shard_lists[n];
  job.shard_lists.clear();
  const TaskPartPlan plan = make_task_parts(live, lists);
  if (!plan.error.empty()) {
    finish(job, JobState::kFailed, "--shards: " + plan.error, plan.fix);
    return;
  }
  job.part_count = uint32_t(plan.owner.size());
  job.part_holders = plan.holders;
  job.part_examples = plan.examples;
  std::map<std::string, std::vector<uint32_t>> shares;
  for (uint32_t p = 0; p < job.part_count; ++p) {
    job.part_owner[p] = plan.owner[p];
    shares[plan.owner[p]].push_back(p);
  }
  job.add_log(plan.summary);
  for (const auto& [n, parts] : shares) send_parts(job, members_.entry(n), parts);
  save(job);
}

void TaskJobs::reassign_shard_parts(JobRecord& job, const std::vector<uint32_t>& orphaned,
                                      const std::string& lost) {
  // What each live node evaluates already, to give the orphans to the least loaded holder.
  std::map<std::string, int64_t> load;
  for (const std::string& n : job.nodes)
    if (n != lost && !job.dropped(n) && members_.alive(n)) load[n] = 0;
  for (const auto& [part, owner] : job.part_owner)
    if (load.count(owner) && !job.part_results.count(part)) load[owner] += job.part_examples[part];
  std::map<std::string, std::vector<uint32_t>> shares;
  for (uint32_t p : orphaned) {
    std::string best;
    for (const auto& [node, path] : job.part_holders[p])
      if (load.count(node) && (best.empty() || load[node] < load[best])) best = node;
    if (best.empty()) {
      const auto& holders = job.part_holders[p];
      const std::string name = holders.count(lost) ? holders.at(lost) : holders.begin()->second;
      finish(job, JobState::kFailed,
                  "part " + std::to_string(p + 1) + " (" + name + ", " +
                      std::to_string(job.part_examples[p]) + " examples) is held only by " +
                      lost + ", which was lost",
                  "start " + lost + " again, or copy the file to another node's --shards "
                  "folder, and submit again");
      return;
    }
    load[best] += job.part_examples[p];
    job.part_owner[p] = best;
    shares[best].push_back(p);
  }
  for (const auto& [n, parts] : shares) {
    job.add_log(std::to_string(parts.size()) + " of " + lost + "'s parts go to " + n +
                ", which holds their files");
    send_parts(job, members_.entry(n), parts);
  }
}

}  // namespace dtrain::daemon
