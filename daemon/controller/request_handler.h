#pragma once
// The controller's answers to dtrain-submit (docs/architecture/daemon.md, "The controller"): submit
// a training job or a cluster evaluation/inference, list the jobs or nodes, one job's status or
// log, cancel, resume. One handler per request kind, found in a table. `fetch` and `stats` are
// answered by ModelFetches and the stats store, which wait or read outside the lock.
// Not thread-safe: the controller calls it under its lock.
#include <cstdint>
#include <functional>
#include <vector>

#include "daemon/controller/job_store.h"
#include "daemon/controller/membership.h"
#include "daemon/controller/scheduler.h"
#include "daemon/controller/task_jobs.h"
#include "daemon/controller/training_jobs.h"
#include "daemon/protocol/client_requests.h"

namespace dtrain::daemon {

class RequestHandler {
 public:
  // `start_next`: a job was queued and may start now; `nodes`: what `nodes --json` prints.
  RequestHandler(JobStore& store, Membership& members, Scheduler& scheduler,
                 TrainingJobs& training, TaskJobs& tasks, std::function<void()> start_next,
                 std::function<Json()> nodes);

  // The reply frame: the handler's JSON, or an error naming the fix (an unknown job, a spec that
  // does not parse, a request of a kind not answered here). Nothing is kept of a refused one.
  std::vector<uint8_t> answer(const ClientRequest& request);

 private:
  using Handler = Json (RequestHandler::*)(const ClientRequest&);
  struct Route {
    RequestKind kind;
    Handler handle;
  };
  static const Route kRoutes[];

  Json submit(const ClientRequest& request);
  void refuse_foreign_init_from(const std::string& init_from, const Requester& who);
  Json submit_task(const ClientRequest& request);
  Json nodes(const ClientRequest& request);
  Json status(const ClientRequest& request);
  Json logs(const ClientRequest& request);
  Json resume(const ClientRequest& request);
  Json cancel(const ClientRequest& request);
  // The job the request names; throws core::UserError when there is none.
  JobRecord& job_of(const ClientRequest& request);
  // Queues `job` (saved first); its status.
  Json enqueue(JobRecord job);

  JobStore& store_;
  Membership& members_;
  Scheduler& scheduler_;
  TrainingJobs& training_;
  TaskJobs& tasks_;
  std::function<void()> start_next_;
  std::function<Json()> nodes_;
};

}  // namespace dtrain::daemon
