// The end of a training job (docs/architecture/daemon.md, "The controller"): its state from the
// nodes' failures and results; a success only once the results pass the checks of result_checks.h.
#include "daemon/controller/result_checks.h"
#include "daemon/controller/training_jobs.h"

namespace dtrain::daemon {
namespace {

// A failure that was not a cancel: the job failed for it.
const std::pair<const std::string, Json>* real_failure(const JobRecord& job) {
  for (const auto& entry : job.failures)
    if (!entry.second.value("cancelled", false)) return &entry;
  return nullptr;
}

}  // namespace

void TrainingJobs::finish(JobRecord& job) {
  job.finished_at = unix_now();
  if (const auto* failed = real_failure(job)) {
    job.state = JobState::kFailed;
    job.error = failed->first + ": " + failed->second.value("error", "failed");
    job.fix = failed->second.value("fix", "");
  } else if (job.cancel_requested) {
    job.state = JobState::kCancelled;
  } else if (job.results.empty()) {
    job.state = JobState::kFailed;
    job.error = "every node of the job was lost";
    job.fix = "check the nodes' logs (journalctl -u dtraind) and submit again";
  } else {
    merge_results(job);
  }
  for (auto& [n, r] : job.results) {
    r.erase("params_sample");
    r.erase("evaluation_part");
  }
  if (const std::string how = job.resume_hint(); job.state != JobState::kSucceeded && !how.empty())
    job.fix = job.fix.empty() ? how : job.fix + "; or " + how;
  nccl_ids_->release(job.id);  // its NCCL bootstrap, formed or not, is served no longer
  closed_(job);
}

// Every node finished: the lowest rank that did speaks for the job (it wrote the model file),
// with the figures over all nodes; the job succeeds only if check_result finds nothing wrong.
void TrainingJobs::merge_results(JobRecord& job) {
  const double diff = replica_difference(job.results);
  const Json* lead = nullptr;
  for (const auto& [n, r] : job.results)
    if (!lead || r.value("rank", 1 << 30) < lead->value("rank", 1 << 30)) lead = &r;
  Json result = *lead;
  result.erase("params_sample");
  result.erase("device");  // per node, in "devices"
  result.erase("evaluation_part");
  merge_evaluation(job.results, result, job);
  result["replica_max_relative_difference"] = diff;
  result["replicas_compared"] = job.results.size();  // the nodes that finished, not the lost
  result["lost_nodes"] = job.lost_nodes;
  result["rejoined_nodes"] = job.rejoined_nodes;
  result["joined_nodes"] = job.joined_nodes;
  // Over all nodes: throughput, the updates each applied (the exactly-once check) and how far
  // ahead of another worker's applied messages any worker ever was (training.sync).
  double samples_per_sec = 0;
  int64_t ahead = 0;
  result["applied_updates"] = Json::object();
  result["devices"] = Json::object();  // where each node's workers ran: cpu or "gpu 0, 1"
  for (const auto& [n, r] : job.results) {
    samples_per_sec += r.value("samples_per_sec", 0.0);
    result["devices"][n] = r.value("device", std::string("cpu"));
    if (r.contains("applied_updates")) result["applied_updates"][n] = r["applied_updates"];
    ahead = std::max(ahead, r.value("max_steps_ahead", int64_t(0)));
  }
  result["samples_per_sec"] = samples_per_sec;
  result["max_steps_ahead"] = ahead;
  job.result = result;
  if (std::optional<JobFailure> f = check_result(job.results, result, diff)) {
    job.state = JobState::kFailed;
    job.error = f->error;
    job.fix = f->fix.empty() ? "report this with `dtrain-submit logs " + job_id_text(job.id) + "`"
                             : f->fix;
  } else {
    job.state = JobState::kSucceeded;
  }
}

}  // namespace dtrain::daemon
