#include "daemon/controller/controller.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/util/error.h"
#include "daemon/controller/job_access.h"
#include "daemon/controller/node_use.h"
#include "daemon/protocol/control_frames.h"
#include "transport/mesh/mesh_map.h"
#include "transport/wire/datagram.h"

namespace dtrain::daemon {

using transport::ControlConnection;

Controller::Controller(const DaemonConfig& config, std::unique_ptr<JobRecords> records)
    : config_(config),
      store_(records ? std::move(records) : std::make_unique<FileJobRecords>(config.data_dir)),
      stats_(std::make_unique<StatsStore>(config.data_dir + "/controller/stats.db")),
      training_(config_, store_, members_, scheduler_, *stats_,
                [this](JobRecord& job) { close_job(job); }, [this] { start_next(); }),
      tasks_(config_, store_, members_, scheduler_, [this](JobRecord& job) { close_job(job); }),
      fetches_(mutex_, store_, members_, stopping_),
      requests_(store_, members_, scheduler_, training_, tasks_, [this] { start_next(); },
                [this] { return nodes_locked(); }) {
  // A fenced-out write stops every session before the lock is released: frames queued in the
  // same act (a Cancel before the record's save) never leave (docs/architecture/daemon.md,
  // "Standby controllers").
  store_.on_fenced([this] { stopping_ = silenced_ = true; });
  const JobStore::Recovered found = store_.recover();
  for (uint64_t id : found.running) {
    JobRecord& job = *store_.find(id);
    scheduler_.set_running(id, job.owner);
    training_.begin_adoption(job);
  }
  for (uint64_t id : found.queued) scheduler_.enqueue(id, store_.find(id)->owner);
  spdlog::info("controller: {} past jobs, {} running, {} queued", store_.size(),
               found.running.size(), found.queued.size());
}

void Controller::serve(ControlConnection& c) {
  const bool client = c.peer_identity().role == transport::ControlIdentity::Role::kClient;
  // A client's request is small; what it brings (a task's model) follows in a frame of its own,
  // taken only once the request, read and authenticated, said how large (receive_request_data).
  const std::vector<uint8_t> first = client
                                         ? c.receive_at_most(std::chrono::seconds(10),
                                                             kClientRequestFrameBytes)
                                         : c.receive(std::chrono::seconds(10));
  const control::ControlFrame& frame = read_control_frame(first);
  if (frame.body_as_Register() && client) {
    spdlog::warn("controller: {} ({}) tried to register as a node: refused", c.peer(),
                 c.peer_identity().describe());
    c.send(reply_error("a client credential cannot register a node",
                       "nodes register with the cluster key (key_file in dtraind.yaml)"));
    return;
  }
  if (const auto* r = frame.body_as_Register()) {
    NodeRegistration node;
    if (!read_registration(*r, node)) {
      c.send(reply_error("registration without a node name or address",
                         "run the same dtrain release on every machine"));
      return;
    }
    serve_node(c, node);
    return;
  }
  if (const auto* q = frame.body_as_Request()) return serve_request(c, *q, first.size());
  c.send(reply_error("unexpected first control frame", "run the same dtrain release everywhere"));
}

void Controller::serve_request(ControlConnection& c, const control::Request& q,
                               size_t frame_bytes) {
  const RequestKind kind = q.kind();
  if (kind <= RequestKind::Unknown || kind > RequestKind::MAX) {
    c.send(reply_error("unknown request kind " + std::to_string(int(kind)),
                       "use dtrain-submit of this release (control protocol " +
                           std::to_string(transport::kControlVersion) + ")"));
    return;
  }
  ClientRequest request;
  if (!read_request(q, frame_bytes, request)) {
    c.send(reply_error("a " + request_kind_name(kind) + " request with a text or list longer "
                           "than any real request's",
                       "use dtrain-submit of this release"));
    return;
  }
  if (request.data_bytes > 0 && !receive_request_data(c, request)) return;
  request.who = Requester::of(c.peer_identity());
  c.send(kind == RequestKind::Fetch   ? fetches_.serve(request)
         : kind == RequestKind::Stats ? stats_request(request)
                                      : handle_request(request));
}

// The data a request announced (a task's model), in the frame after it: only a task may bring
// any, at most kMaxRequestDataBytes, and the frame must hold exactly what was announced. False
// (refused, with the reason sent) otherwise.
bool Controller::receive_request_data(ControlConnection& c, ClientRequest& request) {
  const std::string size = std::to_string(request.data_bytes) + " bytes";
  if (request.kind != RequestKind::Task || request.data_bytes > kMaxRequestDataBytes) {
    c.send(request.kind != RequestKind::Task
               ? reply_error("a " + request_kind_name(request.kind) + " request announced " +
                                 size + " of data; only a task brings any (its model)",
                             "use dtrain-submit of this release")
               : reply_error("the task's model of " + size + " is larger than the " +
                                 std::to_string(kMaxRequestDataBytes) + " a request may bring",
                             "evaluate a smaller model, or run eval/infer on one machine"));
    return false;
  }
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.check_room();
  } catch (const core::UserError& e) {
    c.send(reply_error(e.what_happened(), e.fix()));
    return false;
  }
  const std::vector<uint8_t> body =
      c.receive_at_most(std::chrono::seconds(60), uint32_t(request.data_bytes) + 1024);
  const control::RequestData* d = read_control_frame(body).body_as_RequestData();
  if (!d || !d->data() || d->data()->size() != request.data_bytes) {
    c.send(reply_error("the task's model did not follow its request as announced (" + size + ")",
                       "use dtrain-submit of this release"));
    return false;
  }
  request.data = shared_bytes({d->data()->begin(), d->data()->end()});
  return true;
}

std::vector<uint8_t> Controller::handle_request(const ClientRequest& request) {
  std::lock_guard<std::mutex> lock(mutex_);
  training_.end_adoption_if_due();  // also when no node of the job ever comes back
  return requests_.answer(request);
}

// `dtrain-submit stats JOB [--node N]`: the job's recorded steps and epochs. Read outside the
// controller's lock (the store has its own, and WAL lets reports be written meanwhile).
std::vector<uint8_t> Controller::stats_request(const ClientRequest& request) {
  const uint64_t job_id = request.job_id;
  Json node_ids;  // the link rows name peers by node id
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const JobRecord* job = store_.find(job_id);
    if (!job)
      return reply_error("no job " + job_id_text(job_id) + " on this controller",
                         "list the jobs with `dtrain-submit status`");
    if (auto no = access_refusal(*job, request.who, "read the stats of"))
      return reply_error(no->what_happened(), no->fix());
    node_ids = members_.node_names();
  }
  try {
    Json j = stats_->query(job_id_text(job_id), request.node);
    j["id"] = job_id_text(job_id);
    j["node_names"] = node_ids;
    return reply_ok(j);
  } catch (const std::exception& e) {
    return reply_error("the stats store could not be read: " + std::string(e.what()),
                       "check the controller's log and its data_dir/controller/stats.db");
  }
}

// Offers the free nodes to the queued jobs in their fair order until one waits for nodes that
// running jobs hold. A job ending meanwhile (its close calls this again) makes another pass.
void Controller::start_next() {
  if (stopping_) return;
  if (starting_) {
    start_again_ = true;
    return;
  }
  struct Starting {  // cleared however the passes end (an exception must not freeze the queue)
    bool& flag;
    ~Starting() { flag = false; }
  } starting{starting_ = true};
  do {
    start_again_ = false;
    start_pass();
  } while (start_again_ && !stopping_);
}

void Controller::start_pass() {
  for (uint64_t id : scheduler_.offer_order()) {
    if (stopping_ || !scheduler_.queued(id)) continue;
    JobRecord& job = *store_.find(id);
    // Its owner's running-jobs limit, as jobs start: one that waits uses up nobody's share.
    if (!may_run_another(job.owner, scheduler_.running_per_owner(), config_.limits)) continue;
    const NodeUse use = node_use(store_, scheduler_.running_ids());
    StartOutcome outcome = StartOutcome::kEnded;
    if (!job.is_task()) {
      outcome = training_.start(job, use);
    } else {
      try {
        outcome = tasks_.start(job, use);
      } catch (const FencedOut&) {
        throw;  // this controller's term ends (job_records.h)
      } catch (const std::exception& e) {  // never leaves the queue stuck behind it
        scheduler_.drop(job.id);
        tasks_.finish(job, JobState::kFailed, std::string("it could not start: ") + e.what(), "");
      }
    }
    if (outcome == StartOutcome::kWaitsForBusy) return;
  }
}

void Controller::drop_from_job(JobRecord& job, const std::string& name, const std::string& why) {
  if (!job.is_task())
    training_.drop(job, name, why);
  else
    tasks_.drop(job, name, why);
}

void Controller::close_job(JobRecord& job) {
  job.add_log(std::string("job ") + job_state_name(job.state) +
              (job.error.empty() ? "" : ": " + job.error));
  const std::string kind = job.is_task() ? std::string(task_kind_word(job.task)) + " " : "";
  spdlog::info("controller: {}job {} ({}) {}", kind, job_id_text(job.id), job.name,
               job_state_name(job.state));
  store_.save(job);
  scheduler_.ended(job.id);
  start_next();
}

void Controller::stop() {
  std::lock_guard<std::mutex> lock(mutex_);
  stopping_ = true;
  fetches_.wake();
  for (uint64_t running : scheduler_.running_ids()) {
    JobRecord& job = *store_.find(running);
    for (const std::string& n : job.nodes) members_.send(n, cancel_frame(job.id));
    job.state = JobState::kCancelled;
    job.error = "the controller was stopped";
    job.fix = job.resume_hint().empty() ? "submit the job again" : job.resume_hint();
    job.finished_at = unix_now();
    job.add_log("cancelled: the controller was stopped");
    store_.save(job);
    scheduler_.ended(running);
  }
}

void Controller::abdicate() {
  std::lock_guard<std::mutex> lock(mutex_);
  stopping_ = silenced_ = true;
  fetches_.wake();
}

// The job's mesh as it was built at the start (the nodes repair it themselves after a loss):
// [{"node", "parent"}], the root first with no parent.
Json Controller::mesh_tree(const JobRecord& job) {
  std::vector<transport::MeshMember> members;
  std::map<uint32_t, std::string> names;
  for (const Json& m : job.members) {
    const std::string name = m.value("name", "");
    if (name.empty()) continue;  // an elastic job's vacant slot
    members.push_back({m.value("id", 0u), "", 0, 0});
    names[members.back().id] = name;
  }
  Json tree = Json::array();
  if (members.empty()) return tree;
  const transport::MeshMap map =
      transport::MeshMap::build(job.mesh.empty() ? "plain" : job.mesh, members);
  for (const transport::MeshMember& m : map.members())
    tree.push_back({{"node", names[m.id]},
                    {"parent", m.id == map.root() ? "" : names[m.parent]}});
  return tree;
}

// The dashboard's job page (docs/architecture/daemon.md, "Dashboard"): the job, its log, its stats
// history (at most about kDashboardSteps step rows: it is fetched every second) and the nodes'
// names. Throws core::UserError for a job it does not have.
Json Controller::dashboard_job(uint64_t job_id) {
  constexpr int64_t kDashboardSteps = 6000;
  Json j;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const JobRecord* job = store_.find(job_id);
    if (!job)
      throw core::UserError("no job " + job_id_text(job_id) + " on this controller",
                            "pick one from the job list");
    j = job->to_json();
    j["log"] = job->log;
    for (const auto& [name, r] : job->results)  // the model's size, for "vs dense"
      if (r.contains("params")) j["params"] = r["params"];
    j["mesh_tree"] = mesh_tree(*job);
    j["node_names"] = members_.node_names();
  }
  j["stats"] = stats_->query(job_id_text(job_id), "", kDashboardSteps);
  return j;
}

Json Controller::nodes_locked() {
  Json nodes = Json::array();
  const NodeUse use = node_use(store_, scheduler_.running_ids());
  members_.for_each([&](const Member& m) {
    // Every running job's hold on the node (the whole node, or its cores and GPUs).
    Json jobs = Json::array();
    if (m.alive && use.holds.count(m.name))
      for (const NodeHold& h : use.holds.at(m.name))
        jobs.push_back(h.whole ? Json{{"id", job_id_text(h.job)}, {"whole_node", true}}
                               : Json{{"id", job_id_text(h.job)}, {"cores", h.cores},
                                      {"gpus", h.gpus}});
    const std::string first = jobs.empty() ? "" : jobs[0].value("id", std::string());
    nodes.push_back({{"name", m.name}, {"id", m.id}, {"address", m.address},
                     {"data_port", m.data_port}, {"data_lanes", m.data_lanes},
                     {"data_mtu", m.data_mtu},
                     {"cores", m.cores}, {"gpus", gpus_json(m.gpus)},
                     {"state", m.alive ? "alive" : "lost"},
                     {"last_heard_seconds_ago", members_.seconds_since_heard(m)},
                     {"running_job", first}, {"jobs", jobs}});
  });
  // What a node or a client must speak to join or talk to this cluster, and where.
  const Json protocol = {{"control_version", transport::kControlVersion},
                         {"wire_version", transport::kWireVersion},
                         {"control_port", control_port_ ? control_port_.load()
                                                        : config_.control_port}};
  return {{"nodes", nodes}, {"protocol", protocol}};
}

Json Controller::nodes_json() {
  std::lock_guard<std::mutex> lock(mutex_);
  return nodes_locked();
}

Json Controller::jobs_json() {
  std::lock_guard<std::mutex> lock(mutex_);
  return store_.list_json();
}

}  // namespace dtrain::daemon
