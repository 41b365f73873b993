// What a node's report does to its training job (docs/architecture/daemon.md, "The controller").
#include <spdlog/spdlog.h>

#include "daemon/controller/training_jobs.h"
#include "daemon/protocol/node_reports_json.h"

namespace dtrain::daemon {

void TrainingJobs::on_report(JobRecord& job, Member& m, const JobMessageIn& in) {
  // A report of an earlier part of this node (queued while it was paused or cut off, sent once
  // it was back and had been sent the job again): not the job's any more.
  if (in.kind != JobKind::Log && in.part != 0 && job.parts.count(m.name) &&
      in.part != job.parts.at(m.name)) {
    spdlog::info("controller: ignored a '{}' report of an earlier part of {}",
                 job_kind_name(in.kind), m.name);
    return;
  }
  // A dropped node, or one not admitted yet (rejoining, or joining an elastic job).
  if ((job.dropped(m.name) || listed(job.rejoining, m.name)) && !on_dropped_report(job, m, in))
    return;
  switch (in.kind) {
    case JobKind::Progress:
      job.progress[m.name] = with_part(progress_json(std::get<ProgressReport>(in.report)), in.part);
      break;
    case JobKind::Log:
      job.add_log(m.name + ": " + std::get<LogReport>(in.report).line);
      break;
    case JobKind::Attached:
      announce_rejoin(job, m.name);
      break;
    case JobKind::Shards:
      on_shards(job, m, std::get<ShardsReport>(in.report));
      break;
    case JobKind::Rejoined:
      on_rejoined(job, m, std::get<RejoinedReport>(in.report));
      break;
    case JobKind::Result:
      on_result(job, m, in);
      break;
    case JobKind::Failed:
      on_node_failed(job, m, std::get<FailedReport>(in.report), in.part);
      break;
    case JobKind::Checkpoint:
      on_checkpoint(job, m, std::get<CheckpointReport>(in.report));
      break;
    case JobKind::Stats:
      stats_.add(job_id_text(job.id), m.name, std::get<StatsReport>(in.report));
      break;
    default:
      break;
  }
}

void TrainingJobs::on_rejoined(JobRecord& job, Member& m, const RejoinedReport& back) {
  stop_rejoining(job, m.name);
  const bool joined = !listed(job.lost_nodes, m.name);  // new to the job (elastic)
  std::vector<std::string>& list = joined ? job.joined_nodes : job.rejoined_nodes;
  if (!listed(list, m.name)) list.push_back(m.name);
  job.add_log(m.name + (joined ? ": joined" : ": rejoined") + " at epoch " +
              std::to_string(back.epoch) + " with parameters from " + back.from);
  save(job);  // a restarted controller must know it is back
}

void TrainingJobs::on_result(JobRecord& job, Member& m, const JobMessageIn& in) {
  job.results[m.name] = with_part(result_json(std::get<ResultReport>(in.report)), in.part);
  job.add_log(m.name + ": finished");
  save(job);  // a restarted controller must not wait for it again
  check_finished(job);
}

// A node the job dropped (lost, not taken back yet) may still report: what its old part did
// while it was away (a pause, a cut cable) and queued for when the controller is back, or the
// failure of its attempt to rejoin. Neither may count: the others covered its minibatches, and
// one dropped node must not fail a healthy job. Returns whether the report counts (a log line,
// or the news that it rejoined).
bool TrainingJobs::on_dropped_report(JobRecord& job, Member& m, const JobMessageIn& in) {
  if (in.kind == JobKind::Log || in.kind == JobKind::Rejoined || in.kind == JobKind::Attached ||
      in.kind == JobKind::Shards)
    return true;
  if (in.kind != JobKind::Failed || std::get<FailedReport>(in.report).cancelled) return false;
  const std::string& error = std::get<FailedReport>(in.report).error;
  // The others expect it at their next epoch end (they were told it comes): it will not.
  if (listed(job.rejoining, m.name) && !job.unannounced.count(m.name)) {
    RejoinMessage gone{m.id, m.boot_id};
    gone.withdrawn = true;
    tell_others(job, m.name, rejoin_frame(job.id, gone));
  }
  if (!job.dropped(m.name)) {  // a node joining an elastic job: it leaves it again
    drop(job, m.name, "it failed to join: " + error);
    return false;
  }
  stop_rejoining(job, m.name);  // a later registration may offer it again
  job.add_log(m.name + ": failed after the job dropped it (" + error +
              "); the job continues without it");
  save(job);
  return false;
}

void TrainingJobs::on_node_failed(JobRecord& job, Member& m, const FailedReport& failed,
                                  uint64_t part) {
  job.failures[m.name] = with_part(failed_json(failed), part);
  job.add_log(m.name + ": failed: " + failed.error);
  if (!job.cancel_requested && !failed.cancelled) {
    // One node's failure ends the job everywhere.
    job.cancel_requested = true;
    for (const std::string& n : job.nodes)
      if (n != m.name) members_.send(n, cancel_frame(job.id));
  }
  check_finished(job);
}

// A node wrote its replica at an epoch end. Once every live node has, that epoch is the job's
// consistent checkpoint (status shows it; the log says when it moves on).
// (The reader took only epochs a spec may ask for: a resume message carries it.)
void TrainingJobs::on_checkpoint(JobRecord& job, Member& m, const CheckpointReport& checkpoint) {
  const int64_t before = job.consistent_checkpoint();
  job.checkpoints[m.name] = checkpoint.epoch;
  const int64_t now = job.consistent_checkpoint();
  if (now <= before) return;
  job.add_log("checkpoint: every live node has its replica at the end of epoch " +
              std::to_string(now) + " (" + checkpoint.path + ")");
  save(job);
}

void TrainingJobs::check_finished(JobRecord& job) {
  if (job.finished()) return;
  // A rejoined node is waited for again; one still waiting to be admitted is not.
  for (const std::string& n : job.nodes) {
    if (!job.dropped(n) && !listed(job.rejoining, n) && !job.results.count(n) &&
        !job.failures.count(n))
      return;
  }
  for (const std::string& n : job.rejoining) members_.send(n, cancel_frame(job.id));
  job.rejoining.clear();
  job.unannounced.clear();
  finish(job);
}

}  // namespace dtrain::daemon
