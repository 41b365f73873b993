// A restarted controller adopts the job that was running (docs/architecture/daemon.md, "Controller
// restart"). Its nodes kept training while the controller was away, their reports waiting in
// their outboxes; as each registers again it says which jobs it still runs. A node that still
// runs the job is adopted. One that does not may have finished its part (its result is on its
// way) or restarted (its part is gone): it has until the deadline to report, then it is dropped
// from the job like a lost node, and offered the rejoin. When no node still
// trains it (the whole cluster went down), the job resumes from its consistent checkpoint on the
// nodes that came back (controller_resume.cc).
#include <spdlog/spdlog.h>

#include <algorithm>

#include "daemon/controller/training_jobs.h"

namespace dtrain::daemon {
namespace {

// The boot a member started the job with (0 in records from before boots were kept).
uint64_t start_boot(const JobRecord& job, const std::string& name) {
  for (const Json& m : job.members)
    if (m.is_object() && m.value("name", std::string()) == name)
      return m.value("boot", uint64_t(0));
  return 0;
}

}  // namespace

void TrainingJobs::begin_adoption(JobRecord& job) {
  // Long enough for every node to notice the controller is gone and reconnect (every 2 s).
  const auto grace = std::chrono::milliseconds(2 * config_.peer_timeout_ms + 5000);
  job.adopting = true;
  job.adopt_until = std::chrono::steady_clock::now() + grace;
  job.add_log(std::string(config_.election.enabled() ? "a newly elected controller (" +
                                                           config_.name + ") took over"
                                                     : "the controller restarted") +
              "; the job goes on with the nodes that still train it (waiting up to " +
              std::to_string(grace.count() / 1000) + " s for them)");
  spdlog::info("controller: adopting running job {} ({})", job_id_text(job.id), job.name);
  save(job);
}

void TrainingJobs::adopt(Member& m, const std::vector<uint64_t>& running) {
  for (JobRecord* job : running_jobs()) adopt_into(*job, m, running);
}

void TrainingJobs::adopt_into(JobRecord& job, Member& m, const std::vector<uint64_t>& running) {
  if (!job.adopting || !listed(job.nodes, m.name) || listed(job.adopted, m.name) ||
      job.dropped(m.name) || job.results.count(m.name) || job.failures.count(m.name))
    return;
  if (std::find(running.begin(), running.end(), job.id) != running.end()) {
    job.adopted.push_back(m.name);
    job.add_log("node " + m.name + " still trains it: adopted");
    // Nodes already offered the rejoin before this one was back: it must admit them too.
    // Not those whose new part is not on the mesh yet: they are announced once it is.
    for (const std::string& r : job.rejoining)
      if (const Member* back = members_.find(r); back && !job.unannounced.count(r))
        m.send(rejoin_frame(job.id, {back->id, back->boot_id}));
  } else if (const uint64_t boot = start_boot(job, m.name); boot != 0 && boot != m.boot_id) {
    // A new process: its part of the job is gone. end_adoption decides: the rejoin, or, when
    // every node restarted, the job's resumption from its consistent checkpoint.
    if (!listed(job.restarted, m.name)) job.restarted.push_back(m.name);
  }
  // Else the same process, its part ended: its result or failure is in its outbox, on its way.
  bool everyone = true;
  for (const std::string& n : job.nodes)
    everyone = everyone && (listed(job.adopted, n) || listed(job.restarted, n) ||
                            job.dropped(n) || job.results.count(n) ||
                            job.failures.count(n));
  if (everyone) end_adoption(job);
}

void TrainingJobs::end_adoption_if_due() {
  for (JobRecord* job : running_jobs())
    if (job->adopting && !job->finished() &&
        std::chrono::steady_clock::now() >= job->adopt_until)
      end_adoption(*job);
}

void TrainingJobs::end_adoption(JobRecord& job) {
  job.adopting = false;
  if (resume_from_checkpoint(job)) return;
  // Dropped like a lost node; a live daemon is offered the rejoin. False once the job ended.
  auto leave = [&](const std::string& n, const std::string& why) {
    drop(job, n, why);
    if (job.finished()) return false;
    if (Member* back = members_.find(n); back && back->alive) offer_rejoin_to(job, *back);
    return true;
  };
  const std::vector<std::string> restarted = std::move(job.restarted);
  job.restarted.clear();
  for (const std::string& n : restarted)
    if (!leave(n, "its daemon restarted while the controller was away")) return;
  for (const std::string& n : job.nodes) {
    if (listed(job.adopted, n) || job.dropped(n) || job.results.count(n) ||
        job.failures.count(n))
      continue;
    if (!leave(n, "it did not report after the controller restarted")) return;
  }
  if (job.finished()) return;
  job.add_log(std::string("adopted by the ") +
              (config_.election.enabled() ? "elected controller " + config_.name
                                          : std::string("restarted controller")) +
              ": " + std::to_string(job.adopted.size()) +
              " of " + std::to_string(job.nodes.size()) + " nodes still train it");
  save(job);
}

}  // namespace dtrain::daemon
