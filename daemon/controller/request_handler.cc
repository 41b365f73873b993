#include "daemon/controller/request_handler.h"

#include "core/spec/cluster_rules.h"
#include "core/spec/job_spec_parser.h"
#include "daemon/controller/job_access.h"
#include "daemon/controller/placement.h"
#include "daemon/protocol/job_folder.h"

namespace dtrain::daemon {

const RequestHandler::Route RequestHandler::kRoutes[] = {
    {RequestKind::Submit, &RequestHandler::submit},
    {RequestKind::Task, &RequestHandler::submit_task},
    {RequestKind::Nodes, &RequestHandler::nodes},
    {RequestKind::Status, &RequestHandler::status},
    {RequestKind::Logs, &RequestHandler::logs},
    {RequestKind::Resume, &RequestHandler::resume},
    {RequestKind::Cancel, &RequestHandler::cancel},
};

RequestHandler::RequestHandler(JobStore& store, Membership& members, Scheduler& scheduler,
                               TrainingJobs& training, TaskJobs& tasks,
                               std::function<void()> start_next, std::function<Json()> nodes)
    : store_(store),
      members_(members),
      scheduler_(scheduler),
      training_(training),
      tasks_(tasks),
      start_next_(std::move(start_next)),
      nodes_(std::move(nodes)) {}

std::vector<uint8_t> RequestHandler::answer(const ClientRequest& request) {
  try {
    for (const Route& route : kRoutes)
      if (route.kind == request.kind) return reply_ok((this->*route.handle)(request));
    return reply_error("request '" + request_kind_name(request.kind) + "' is not answered here",
                       "run the same dtrain release everywhere");
  } catch (const core::UserError& e) {
    return reply_error(e.what_happened(), e.fix());
  } catch (const FencedOut&) {
    throw;  // this controller's term ends (job_records.h)
  } catch (const std::exception& e) {  // a request of the wrong shape: refused, nothing kept
    return reply_error(std::string("the request could not be read: ") + e.what(),
                       "use dtrain-submit of this release");
  }
}

JobRecord& RequestHandler::job_of(const ClientRequest& request) {
  JobRecord* job = store_.find(request.job_id);
  if (!job)
    throw core::UserError("no job " + job_id_text(request.job_id) + " on this controller",
                          "list the jobs with `dtrain-submit status`");
  return *job;
}

Json RequestHandler::enqueue(JobRecord job) {
  const uint64_t id = store_.add(std::move(job)).id;
  scheduler_.enqueue(id, store_.find(id)->owner);
  start_next_();
  return store_.find(id)->to_json();
}

// A model.init_from in a job's folder on the nodes (data_dir/jobs/<id>/) is read only if its
// submitter may fetch that job's model; the nodes let the job read that folder then
// (StartMessage::readable_jobs).
void RequestHandler::refuse_foreign_init_from(const std::string& init_from,
                                              const Requester& who) {
  const std::optional<uint64_t> from = job_of_folder_path(init_from);
  if (!from) return;
  const JobRecord* source = store_.find(*from);
  if (!source)
    throw core::UserError("model.init_from '" + init_from + "' is in the folder of job " +
                              job_id_text(*from) + ", which this controller does not know",
                          "name the model of one of your jobs, or put the model under the "
                          "nodes' data_roots");
  check_access(*source, who, "start from the model of");
}

// The spec is checked as the nodes will read it (their data files each node checks itself when
// the job starts), and against the registered nodes: a job they can never run is refused now.
Json RequestHandler::submit(const ClientRequest& request) {
  core::SpecParseOptions options;
  options.check_files = false;
  options.base_dir = request.base_dir;
  const core::JobSpec spec = core::parse_job_spec_text(request.spec, request.source, options);
  core::check_cluster_rules(spec);
  if (const auto refusal = refuse_placement(spec.training, members_.alive_offers()))
    throw core::UserError(refusal->error, refusal->fix);
  training_.refuse_over_limits(spec.training, request.who.name);
  refuse_foreign_init_from(spec.model.init_from, request.who);
  JobRecord job;
  job.name = spec.name;
  job.mode = core::mode_name(spec.training.mode);
  job.spec_text = request.spec;
  job.base_dir = options.base_dir;
  job.owner = request.who.name;
  job.add_log("submitted (" + request.source + ") by " + request.who.describe());
  return enqueue(std::move(job));
}

Json RequestHandler::submit_task(const ClientRequest& request) {
  if (!request.task)
    throw core::UserError("a task request without its task",
                          "use dtrain-submit eval|infer --cluster");
  JobRecord job = tasks_.accept(*request.task, request.data);
  job.owner = request.who.name;
  job.add_log("submitted by " + request.who.describe());
  return enqueue(std::move(job));
}

Json RequestHandler::nodes(const ClientRequest&) { return nodes_(); }

// Without a job: every job. Following a job: the log lines from number log_from on come with
// its status, so one request every half second does (line numbers count from the job's first
// line); those only to whom may read its log.
Json RequestHandler::status(const ClientRequest& request) {
  if (request.job_id == 0) return store_.list_json();
  const JobRecord& job = job_of(request);
  Json j = job.to_json();
  if (request.log_from) {
    check_access(job, request.who, "read the log of");
    const uint64_t from = *request.log_from;
    const size_t first = from > job.log_dropped ? size_t(from - job.log_dropped) : 0;
    Json lines = Json::array();
    for (size_t i = first; i < job.log.size(); ++i) lines.push_back(job.log[i]);
    j["log"] = lines;
    j["log_next"] = job.log_dropped + job.log.size();
  }
  return j;
}

Json RequestHandler::logs(const ClientRequest& request) {
  const JobRecord& job = job_of(request);
  check_access(job, request.who, "read the log of");
  return {{"id", job_id_text(job.id)}, {"log", job.log}};
}

Json RequestHandler::resume(const ClientRequest& request) {
  JobRecord& job = job_of(request);
  check_access(job, request.who, "resume");
  return training_.resume_request(job, request.who.describe());
}

// A job that ended is left as it ended (the client says so); a queued one leaves the queue; a
// running one is told to stop on its nodes (a task ends at once).
Json RequestHandler::cancel(const ClientRequest& request) {
  JobRecord& job = job_of(request);
  check_access(job, request.who, "cancel");
  if (job.finished()) {
    Json j = job.to_json();
    j["already_ended"] = true;
    return j;
  }
  job.cancel_requested = true;
  job.add_log("cancel requested by " + request.who.describe());
  if (job.is_task() && job.state == JobState::kRunning) {
    tasks_.finish(job, JobState::kCancelled, "", "");
    return job.to_json();
  }
  if (job.state == JobState::kQueued) {
    scheduler_.remove(job.id);
    job.state = JobState::kCancelled;
    job.finished_at = unix_now();
    job.model.reset();  // a queued evaluation's model
  } else {
    training_.cancel(job);
  }
  store_.save(job);
  return job.to_json();
}

}  // namespace dtrain::daemon
