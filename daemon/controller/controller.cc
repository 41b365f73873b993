#include "daemon/controller/controller.h"
#include "daemon/controller/result_checks.h"

#include <sodium.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/eval/evaluation.h"
#include "core/spec/cluster_rules.h"
#include "core/spec/job_spec_parser.h"
#include "transport/control/control_connection.h"
#include "transport/control/control_frames.h"
#include "transport/mesh/mesh_map.h"
#include "transport/wire/datagram.h"

namespace dtrain::daemon {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using transport::ControlConnection;
using transport::ControlError;

namespace {

// Whether the job can take a node back (a rejoin): not with early stopping, whose best model
// so far a node back in the job lacks, so it could not end with the same replica.
bool takes_nodes_back(const JobRecord& job) {
  try {
    return !job.spec().training.early_stopping.enabled;
  } catch (const core::UserError&) {
    return false;
  }
}

}  // namespace

Controller::Controller(const DaemonConfig& config)
    : config_(config), jobs_dir_(config.data_dir + "/controller/jobs") {
  randombytes_buf(&next_fetch_, sizeof next_fetch_);
  std::error_code ec;
  fs::create_directories(jobs_dir_, ec);
  if (ec)
    throw core::UserError("cannot create " + jobs_dir_ + ": " + ec.message(),
                          "make data_dir (" + config.data_dir + ") writable for dtraind");
  stats_ = std::make_unique<StatsStore>(config.data_dir + "/controller/stats.db");
  for (JobRecord& job : load_jobs(jobs_dir_)) {
    if (!job.task.empty() && !job.finished()) {
      // Its model and parts were in memory only; a node still running it is an orphan
      // (stop_orphans tells it to stop when it registers).
      job.state = JobState::kFailed;
      job.error = "the controller restarted before the " + job.task + " job ended";
      job.fix = "submit it again";
      job.finished_at = unix_now();
      save_job(jobs_dir_, job);
    }
    if (job.state == JobState::kRunning && running_ == 0) {
      running_ = job.id;
      begin_adoption(job);
    } else if (job.state == JobState::kRunning) {  // two running jobs on disk: only one can be real
      job.state = JobState::kFailed;
      job.error = "the controller stopped while the job was running";
      job.fix = "submit the job again";
      job.finished_at = unix_now();
      save_job(jobs_dir_, job);
    }
    if (job.state == JobState::kQueued) queue_.push_back(job.id);
    jobs_[job.id] = std::move(job);
  }
  spdlog::info("controller: {} past jobs, {} queued", jobs_.size(), queue_.size());
}

bool Controller::known_request(RequestKind kind) {
  return kind > RequestKind::Unknown && kind <= RequestKind::MAX;
}

void Controller::serve(ControlConnection& c) {
  const std::vector<uint8_t> first = c.receive(std::chrono::seconds(10));
  const transport::control::ControlFrame& frame = transport::read_control_frame(first);
  const bool client = c.peer_identity().role == transport::ControlIdentity::Role::kClient;
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
  if (const auto* q = frame.body_as_Request()) {
    const RequestKind kind = q->kind();
    if (!known_request(kind)) {
      c.send(reply_error("unknown request kind " + std::to_string(int(kind)),
                         "use dtrain-submit of this release (control protocol " +
                             std::to_string(transport::kControlVersion) + ")"));
      return;
    }
    ClientRequest request;
    if (!read_request(*q, first.size(), request)) {
      c.send(reply_error("a " + request_kind_name(kind) + " request with a text or list longer "
                             "than any real request's",
                         "use dtrain-submit of this release"));
      return;
    }
    c.send(kind == RequestKind::Fetch   ? fetch_request(request)
           : kind == RequestKind::Stats ? stats_request(request)
                                        : handle_request(request));
    return;
  }
  c.send(reply_error("unexpected first control frame", "run the same dtrain release everywhere"));
}

void Controller::serve_node(ControlConnection& c, const NodeRegistration& node) {
  const uint32_t id = node.node_id;
  const uint64_t boot_id = node.boot_id;
  const std::string& name = node.name;
  uint64_t session;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [other_name, other] : members_)
      if (other.id == id && other_name != name && other.alive) {
        c.send(reply_error("node " + name + " has the same node id (" + std::to_string(id) +
                               ") as node " + other_name,
                           "stop dtraind on " + name + ", delete its data_dir/node_id and start "
                           "it again (a new id is drawn)"));
        return;
      }
    if (node.data_lanes < 1 || node.data_lanes > transport::kMaxLanes) {
      c.send(reply_error("node " + name + " registered with " + std::to_string(node.data_lanes) +
                             " data lanes, outside 1 .. " + std::to_string(transport::kMaxLanes),
                         "run the same dtrain release everywhere"));
      return;
    }
    // Lanes are steered by the receiving node's count: nodes that differ refuse each other's
    // datagrams, so one that differs from the live nodes is refused here, where it is clear.
    for (const auto& [other_name, other] : members_)
      if (other.alive && other_name != name && other.data_lanes != node.data_lanes) {
        c.send(reply_error("node " + name + " has data.lanes " + std::to_string(node.data_lanes) +
                               ", and node " + other_name + " (alive) has " +
                               std::to_string(other.data_lanes) +
                               ": nodes of different lane counts cannot exchange updates",
                           "set data.lanes: " + std::to_string(other.data_lanes) + " in " + name +
                               "'s dtraind.yaml, or stop every node and give them all the new "
                               "count"));
        return;
      }
    Member& m = members_[name];
    if (m.alive && m.session != 0 && m.boot_id != boot_id) {
      // A new process before its old connection was seen to end: the old one is gone, with
      // its part of the running job (which it may now rejoin).
      node_lost(m, "it restarted");
    } else if (m.alive && m.session != 0) {
      spdlog::info("controller: node {} reconnected", name);
    }
    m.boot_id = boot_id;
    m.id = id;
    m.name = name;
    m.address = node.address;
    m.data_port = node.data_port;
    m.data_lanes = node.data_lanes;
    m.cores = node.cores;
    m.gpus = node.gpus;
    m.alive = true;
    m.session = session = next_session_++;
    m.last_heard = Clock::now();
    m.outbox.clear();
    fetched_.notify_all();  // a fetch sent on its old session asks again
    stop_orphans(m, node.running_jobs);
    recall_dropped(m, node.running_jobs);
    adopt(m, node.running_jobs);
    offer_rejoin(m);
    offer_join(m);
    resend_parts(m);
    resend_data_plan(m);
    start_next();
  }
  spdlog::info("controller: node {} (id {}) registered from {}, data {}:{}, {} cores, {} GPUs",
               name, id, c.peer(), node.address, node.data_port, node.cores, node.gpus.size());
  c.send(reply_ok({{"node_id", id}, {"name", name}}));
  const auto timeout = std::chrono::milliseconds(config_.peer_timeout_ms);
  std::string why = "its connection closed";
  try {
    for (;;) {
      std::deque<std::vector<uint8_t>> out;
      bool stop = false;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        Member& m = members_[name];
        if (m.session != session) return;  // replaced by a newer registration
        end_adoption_if_due();
        out.swap(m.outbox);
        stop = stopping_;
        if (Clock::now() - m.last_heard > timeout) {
          why = "silent for " + std::to_string(config_.peer_timeout_ms) + " ms";
          break;
        }
      }
      for (const auto& frame : out) c.send(frame);
      if (stop) return;
      if (!c.wait_readable(std::chrono::milliseconds(50))) continue;
      JobMessageIn in;
      const bool job_message = read_job_message(c.receive(std::chrono::seconds(30)), in);
      std::lock_guard<std::mutex> lock(mutex_);
      Member& m = members_[name];
      m.last_heard = Clock::now();
      if (job_message) on_job_message_safely(m, in);
      else spdlog::warn("controller: ignored a malformed control frame from {}", name);
    }
  } catch (const ControlError& e) {
    why = std::string("its connection ended: ") + e.what();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  Member& m = members_[name];
  if (m.session == session && m.alive) node_lost(m, why);
}

// One malformed report (a field of the wrong type, say) fails that report, never the node's
// session: were it to end the session, the member would stay "alive" with nobody reading it.
void Controller::on_job_message_safely(Member& m, const JobMessageIn& in) {
  try {
    on_job_message(m, in);
  } catch (const std::exception& e) {
    spdlog::warn("controller: ignored a malformed '{}' report from {}: {}",
                 job_kind_name(in.kind), m.name, e.what());
  }
}

void Controller::on_job_message(Member& m, const JobMessageIn& in) {
  const uint64_t job_id = in.job_id;
  if (in.kind == JobKind::Heartbeat || job_id == 0) return;
  if (in.kind == JobKind::ModelChunk) return on_model_chunk(m, in);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  JobRecord& job = it->second;
  // A node speaks only about jobs it is a member of, and only reports.
  if (!listed(job.nodes, m.name) || in.kind == JobKind::Start || in.kind == JobKind::Cancel ||
      in.kind == JobKind::Rejoin || in.kind == JobKind::FetchModel || in.kind == JobKind::Task) {
    spdlog::warn("controller: node {} sent '{}' about job {}, which it is not a member of or "
                 "may not send: ignored", m.name, job_kind_name(in.kind), job_id_text(job_id));
    return;
  }
  // A restarted node that was never admitted may still report after the job ended.
  if (job.finished() && in.kind != JobKind::Log) return;
  if (!job.task.empty()) {
    if (!job.dropped(m.name)) on_task_report(job, m, in);
    return;
  }
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
    case JobKind::Rejoined: {
      const RejoinedReport& back = std::get<RejoinedReport>(in.report);
      stop_rejoining(job, m.name);
      const bool joined = !listed(job.lost_nodes, m.name);  // new to the job (elastic)
      std::vector<std::string>& list = joined ? job.joined_nodes : job.rejoined_nodes;
      if (!listed(list, m.name)) list.push_back(m.name);
      job.add_log(m.name + (joined ? ": joined" : ": rejoined") + " at epoch " +
                  std::to_string(back.epoch) + " with parameters from " + back.from);
      save(job);  // a restarted controller must know it is back
      break;
    }
    case JobKind::Result:
      job.results[m.name] = with_part(result_json(std::get<ResultReport>(in.report)), in.part);
      job.add_log(m.name + ": finished");
      save(job);  // a restarted controller must not wait for it again
      check_finished(job);
      break;
    case JobKind::Failed:
      on_node_failed(job, m, std::get<FailedReport>(in.report), in.part);
      break;
    case JobKind::Checkpoint:
      on_checkpoint(job, m, std::get<CheckpointReport>(in.report));
      break;
    case JobKind::Stats:
      stats_->add(job_id_text(job.id), m.name, std::get<StatsReport>(in.report));
      break;
    default:
      break;
  }
}

// A node wrote its replica at an epoch end. Once every live node has, that epoch is the job's
// consistent checkpoint (status shows it; the log says when it moves on).
// (The reader took only epochs a spec may ask for: a resume message carries it.)
void Controller::on_checkpoint(JobRecord& job, Member& m, const CheckpointReport& checkpoint) {
  const int64_t before = job.consistent_checkpoint();
  job.checkpoints[m.name] = checkpoint.epoch;
  const int64_t now = job.consistent_checkpoint();
  if (now <= before) return;
  job.add_log("checkpoint: every live node has its replica at the end of epoch " +
              std::to_string(now) + " (" + checkpoint.path + ")");
  save(job);
}

// A node the job dropped (lost, not taken back yet) may still report: what its old part did
// while it was away (a pause, a cut cable) and queued for when the controller is back, or the
// failure of its attempt to rejoin. Neither may count: the others covered its minibatches, and
// one dropped node must not fail a healthy job. Returns whether the report counts (a log line,
// or the news that it rejoined).
bool Controller::on_dropped_report(JobRecord& job, Member& m, const JobMessageIn& in) {
  if (in.kind == JobKind::Log || in.kind == JobKind::Rejoined || in.kind == JobKind::Attached ||
      in.kind == JobKind::Shards)
    return true;
  if (in.kind == JobKind::Failed && !std::get<FailedReport>(in.report).cancelled) {
    const std::string& error = std::get<FailedReport>(in.report).error;
    // The others expect it at their next epoch end (they were told it comes): it will not.
    if (listed(job.rejoining, m.name) && !job.unannounced.count(m.name)) {
      RejoinMessage gone{m.id, m.boot_id};
      gone.withdrawn = true;
      tell_others(job, m.name, rejoin_frame(job.id, gone));
    }
    if (!job.dropped(m.name)) {  // a node joining an elastic job: it leaves it again
      drop_from_job(job, m.name, "it failed to join: " + error);
      return false;
    }
    stop_rejoining(job, m.name);  // a later registration may offer it again
    job.add_log(m.name + ": failed after the job dropped it (" + error +
                "); the job continues without it");
    save(job);
  }
  return false;
}

// A node the running job dropped came back with its old part still running (it was paused, or
// cut off, for longer than the peer timeout: the same process, the same boot). It is taken back
// with a live replica (offer_rejoin; the node stops its old part for the new one), or, by a job
// that cannot take nodes back, told to stop its part.
void Controller::recall_dropped(Member& m, const std::vector<uint64_t>& running) {
  if (running_ == 0 || std::find(running.begin(), running.end(), running_) == running.end())
    return;
  JobRecord& job = jobs_[running_];
  if (!job.dropped(m.name) || listed(job.rejoining, m.name)) return;
  spdlog::warn("controller: node {} is back and still trains job {}, which dropped it", m.name,
               job_id_text(job.id));
  if (takes_nodes_back(job)) {
    job.add_log("node " + m.name + " is back after the job dropped it; it is taken back with a "
                "live replica");
    return;
  }
  m.outbox.push_back(cancel_frame(job.id));
  job.add_log("node " + m.name + " is back after the job dropped it; " +
              (job.task.empty() ? std::string("a job with early stopping does not take nodes "
                                              "back, so it was told to stop its part (dropped)")
                                : "its parts are done by the others, so it was told to stop"));
  save(job);
}

void Controller::on_node_failed(JobRecord& job, Member& m, const FailedReport& failed,
                                uint64_t part) {
  job.failures[m.name] = with_part(failed_json(failed), part);
  job.add_log(m.name + ": failed: " + failed.error);
  if (!job.cancel_requested && !failed.cancelled) {
    // One node's failure ends the job everywhere.
    job.cancel_requested = true;
    for (const std::string& n : job.nodes)
      if (n != m.name && members_.count(n)) members_[n].outbox.push_back(cancel_frame(job.id));
  }
  check_finished(job);
}

// A node that trains a job this controller is not running (it restarted mid-job and marked the
// job failed, or never heard of it) is told to stop, so no orphan trains beside the next job.
void Controller::stop_orphans(Member& m, const std::vector<uint64_t>& running) {
  for (uint64_t id : running) {
    // The running job's members keep it; anyone else (left out when it resumed) stops.
    if (id == running_ && listed(jobs_[running_].nodes, m.name)) continue;
    m.outbox.push_back(cancel_frame(id));
    spdlog::warn("controller: node {} is still training job {}, which is not running here; "
                 "told it to stop", m.name, job_id_text(id));
    auto it = jobs_.find(id);
    if (it == jobs_.end()) continue;
    it->second.add_log("node " + m.name + " was still training it; told it to stop");
    save(it->second);
  }
}

NodeOffer Controller::offer(const Member& m) {
  NodeOffer o;
  o.name = m.name;
  o.cores = m.cores;
  for (const auto& g : m.gpus) o.gpus.push_back(g.index);
  return o;
}

std::vector<NodeOffer> Controller::alive_offers() const {
  std::vector<NodeOffer> out;
  for (const auto& [name, m] : members_)
    if (m.alive) out.push_back(offer(m));
  return out;
}

StartMessage Controller::start_message(const JobRecord& job, size_t rank) const {
  StartMessage start;
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
    m.device = j.value("device", std::string("cpu"));
    m.gpus = j.value("gpus", std::vector<int>{});
    // Each member's boot as registered now (a member that restarted since the job began has a
    // new one): its peers take datagrams from that boot only.
    auto it = members_.find(m.name);
    if (it != members_.end() && it->second.id == m.id) m.boot = it->second.boot_id;
    start.members.push_back(std::move(m));
  }
  return start;
}

void Controller::tell_others(const JobRecord& job, const std::string& except,
                             const std::vector<uint8_t>& frame) {
  for (const std::string& n : job.nodes)
    if (n != except && members_.count(n) && members_[n].alive) members_[n].outbox.push_back(frame);
}

void Controller::send_start(JobRecord& job, Member& m, StartMessage start) {
  do randombytes_buf(&start.part, sizeof start.part);
  while (start.part == 0 || start.part >> 53);  // stays exact in JSON readers
  job.parts[m.name] = start.part;
  m.outbox.push_back(start_frame(job.id, start));
}

void Controller::offer_rejoin(Member& m) {
  if (running_ == 0) return;
  JobRecord& job = jobs_[running_];
  if (!job.dropped(m.name) || listed(job.rejoining, m.name) ||
      job.results.count(m.name) || job.failures.count(m.name) || job.cancel_requested ||
      !takes_nodes_back(job))
    return;
  int rank = -1;
  std::vector<uint32_t> lost;
  for (size_t i = 0; i < job.members.size(); ++i) {
    const Json& member = job.members[i];
    const std::string name = member.value("name", "");
    if (name == m.name) {
      if (member.value("id", 0u) != m.id) return;  // another machine under the same name
      rank = int(i);
    } else if (job.dropped(name)) {
      lost.push_back(member.value("id", 0u));
    }
  }
  if (rank < 0) return;
  StartMessage start = start_message(job, size_t(rank));
  start.rejoin = true;
  start.lost = lost;
  send_start(job, m, start);
  job.unannounced[m.name] = rejoin_frame(job.id, {m.id, m.boot_id});
  job.rejoining.push_back(m.name);
  job.add_log("node " + m.name + " is back; it rejoins at the next epoch end");
}

// The rejoining (or joining) node's new part takes the job's datagrams now: the others may
// admit it at their next epoch end and send it their parameters.
void Controller::announce_rejoin(JobRecord& job, const std::string& name) {
  auto it = job.unannounced.find(name);
  if (it == job.unannounced.end()) return;
  tell_others(job, name, it->second);
  job.unannounced.erase(it);
}

void Controller::stop_rejoining(JobRecord& job, const std::string& name) {
  unlist(job.rejoining, name);
  job.unannounced.erase(name);
}

void Controller::node_lost(Member& m, const std::string& why) {
  m.alive = false;
  fetched_.notify_all();  // a fetch waiting for it asks the next node
  spdlog::warn("controller: node {} lost: {}", m.name, why);
  if (running_ != 0) drop_from_job(jobs_[running_], m.name, why);
}

void Controller::drop_from_job(JobRecord& job, const std::string& name, const std::string& why) {
  if (!listed(job.nodes, name)) return;
  if (job.results.count(name) || job.failures.count(name)) return;
  if (!listed(job.lost_nodes, name)) job.lost_nodes.push_back(name);
  if (!job.task.empty()) {  // an evaluation or inference: the others do its parts
    job.add_log("node " + name + " lost (" + why + ")");
    reassign_parts(job, name);
    save(job);
    return;
  }
  stop_rejoining(job, name);
  unlist(job.rejoined_nodes, name);
  job.checkpoints.erase(name);  // back, it reports new ones; its old ones must not hold back
  job.add_log("node " + name + " lost (" + why + "); the job continues on the others");
  below_minimum(job);
  plan_data_if_ready(job);  // it may have been the list the plan waited for
  check_finished(job);
  save(job);
}

void Controller::check_finished(JobRecord& job) {
  if (job.finished()) return;
  // A rejoined node is waited for again; one still waiting to be admitted is not.
  for (const std::string& n : job.nodes) {
    if (!job.dropped(n) && !listed(job.rejoining, n) && !job.results.count(n) &&
        !job.failures.count(n))
      return;
  }
  for (const std::string& n : job.rejoining)
    if (members_.count(n)) members_[n].outbox.push_back(cancel_frame(job.id));
  job.rejoining.clear();
  job.unannounced.clear();
  finish(job);
}

void Controller::finish(JobRecord& job) {
  job.finished_at = unix_now();
  bool all_cancelled = !job.failures.empty();
  for (const auto& [n, f] : job.failures) all_cancelled = all_cancelled && f.value("cancelled", false);
  if (!job.failures.empty() && !all_cancelled) {
    for (const auto& [n, f] : job.failures) {
      if (f.value("cancelled", false)) continue;
      job.state = JobState::kFailed;
      job.error = n + ": " + f.value("error", "failed");
      job.fix = f.value("fix", "");
      break;
    }
  } else if (job.cancel_requested) {
    job.state = JobState::kCancelled;
  } else if (job.results.empty()) {
    job.state = JobState::kFailed;
    job.error = "every node of the job was lost";
    job.fix = "check the nodes' logs (journalctl -u dtraind) and submit again";
  } else {
    const double diff = replica_difference(job.results);
    // The lowest rank that finished speaks for the job (it wrote the model file).
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
    // Over all nodes: throughput, the updates each applied (the exactly-once check) and how
    // far ahead of another worker's applied messages any worker ever was (training.sync).
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
  for (auto& [n, r] : job.results) {
    r.erase("params_sample");
    r.erase("evaluation_part");
  }
  if (const std::string how = job.resume_hint(); job.state != JobState::kSucceeded && !how.empty())
    job.fix = job.fix.empty() ? how : job.fix + "; or " + how;
  close_job(job);
}

// A training or task job has its final state: logged, saved, and the queue moves on.
void Controller::close_job(JobRecord& job) {
  job.add_log(std::string("job ") + job_state_name(job.state) +
              (job.error.empty() ? "" : ": " + job.error));
  spdlog::info("controller: {}job {} ({}) {}", job.task.empty() ? "" : job.task + " ",
               job_id_text(job.id), job.name, job_state_name(job.state));
  save(job);
  if (running_ == job.id) running_ = 0;
  start_next();
}

void Controller::save(const JobRecord& job) { save_job(jobs_dir_, job); }

Json Controller::submit(const ClientRequest& request) {
  const std::string& spec_text = request.spec;
  const std::string& source = request.source;
  core::SpecParseOptions options;
  options.check_files = false;  // the nodes check their data files when the job starts
  options.base_dir = request.base_dir;
  const core::JobSpec spec = core::parse_job_spec_text(spec_text, source, options);
  core::check_cluster_rules(spec);
  if (const auto refusal = refuse_placement(spec.training, alive_offers()))
    throw core::UserError(refusal->error, refusal->fix);
  JobRecord job;
  job.name = spec.name;
  job.mode = spec.training.mode;
  job.spec_text = spec_text;
  job.base_dir = options.base_dir;
  job.add_log("submitted (" + source + ")");
  return enqueue(std::move(job));
}

Json Controller::enqueue(JobRecord job) {
  do randombytes_buf(&job.id, sizeof job.id);
  while (job.id == 0 || jobs_.count(job.id));
  job.submitted_at = unix_now();
  const uint64_t id = job.id;
  save(job);
  jobs_[id] = std::move(job);
  queue_.push_back(id);
  start_next();
  return jobs_[id].to_json();
}

void Controller::start_next() {
  if (running_ != 0 || queue_.empty() || stopping_) return;
  JobRecord& job = jobs_[queue_.front()];
  if (!job.task.empty()) {
    try {
      start_task(job);
    } catch (const std::exception& e) {  // never leaves the queue stuck behind it
      queue_.erase(std::remove(queue_.begin(), queue_.end(), job.id), queue_.end());
      finish_task(job, JobState::kFailed, std::string("it could not start: ") + e.what(), "");
    }
    return;
  }
  core::JobSpec spec;
  try {
    spec = job.spec();
  } catch (const core::UserError& e) {
    // Checked at submit; a record from another release may still not parse. That job fails,
    // the queue goes on.
    queue_.pop_front();
    job.state = JobState::kFailed;
    job.error = e.what_happened();
    job.fix = e.fix();
    job.finished_at = unix_now();
    job.add_log("failed before it started: " + job.error);
    save(job);
    start_next();
    return;
  }
  if (job.resume_epoch >= 0) {
    start_resumed(job);
    return;
  }
  std::vector<Member*> alive;
  size_t registered = 0;
  for (auto& [name, m] : members_) {
    registered += m.alive;
    if (m.alive && node_eligible(spec.training, offer(m))) alive.push_back(&m);
  }
  std::sort(alive.begin(), alive.end(), [](Member* a, Member* b) { return a->id < b->id; });
  const size_t wanted = spec.training.nodes > 0 ? size_t(spec.training.nodes) : alive.size();
  // Elastic (nodes: {min, max}): at least `wanted`, as many as are there up to max.
  const size_t take = spec.training.nodes_max > 0
                          ? std::min(alive.size(), size_t(spec.training.nodes_max))
                          : wanted;
  if (alive.empty() || alive.size() < wanted) {
    const bool gpu = spec.training.device == "gpu";
    const std::string line = "waiting for " + std::to_string(std::max<size_t>(1, wanted)) +
                             (gpu ? " nodes with a GPU (" + std::to_string(alive.size()) + " of " +
                                        std::to_string(registered) + " registered have one)"
                                  : " nodes (" + std::to_string(registered) + " registered)");
    if (job.log.empty() || job.log.back().find(line) == std::string::npos) job.add_log(line);
    return;
  }
  alive.resize(take);
  queue_.pop_front();
  running_ = job.id;
  job.state = JobState::kRunning;
  job.started_at = unix_now();
  Json members = Json::array();
  for (Member* m : alive) {
    const NodePlacement place = place_on(spec.training, offer(*m));
    members.push_back({{"id", m->id}, {"name", m->name}, {"boot", m->boot_id},
                       {"address", m->address},
                       {"port", m->data_port}, {"workers", place.workers},
                       {"device", place.gpu ? "gpu" : "cpu"}, {"gpus", place.gpus}});
    job.nodes.push_back(m->name);
  }
  job.members = members;
  job.data_plan = Json();  // a resumed job's nodes may differ: they list their files again
  job.shard_lists.clear();
  add_vacant_slots(job, spec.training);
  job.mesh = spec.training.mesh;
  for (size_t rank = 0; rank < alive.size(); ++rank)
    send_start(job, *alive[rank], start_message(job, rank));
  job.add_log("started on " + std::to_string(alive.size()) + " nodes");
  spdlog::info("controller: job {} ({}) started on {} nodes", job_id_text(job.id), job.name,
               alive.size());
  save(job);
}

std::vector<uint8_t> Controller::handle_request(const ClientRequest& request) {
  const RequestKind kind = request.kind;
  const uint64_t job_id = request.job_id;
  std::lock_guard<std::mutex> lock(mutex_);
  end_adoption_if_due();  // also when no node of the job ever comes back
  try {
    if (kind == RequestKind::Submit) return reply_ok(submit(request));
    if (kind == RequestKind::Task) {
      if (!request.task)
        return reply_error("a task request without its task", "use dtrain-submit eval|infer --cluster");
      return reply_ok(submit_task(*request.task, request.data));
    }
    if (kind == RequestKind::Nodes) return reply_ok(nodes_locked());
    if (kind == RequestKind::Status && job_id == 0) return reply_ok(jobs_locked());
    auto it = jobs_.find(job_id);
    if (it == jobs_.end())
      return reply_error("no job " + job_id_text(job_id) + " on this controller",
                         "list the jobs with `dtrain-submit status`");
    JobRecord& job = it->second;
    if (kind == RequestKind::Status) {
      Json j = job.to_json();
      // Following a job: the log lines from number log_from on come with its status, so one
      // request every half second does (line numbers count from the job's first line).
      if (request.log_from) {
        const uint64_t from = *request.log_from;
        const size_t first = from > job.log_dropped ? size_t(from - job.log_dropped) : 0;
        Json lines = Json::array();
        for (size_t i = first; i < job.log.size(); ++i) lines.push_back(job.log[i]);
        j["log"] = lines;
        j["log_next"] = job.log_dropped + job.log.size();
      }
      return reply_ok(j);
    }
    if (kind == RequestKind::Logs) return reply_ok({{"id", job_id_text(job.id)}, {"log", job.log}});
    if (kind == RequestKind::Resume) return reply_ok(resume_request(job));
    if (kind == RequestKind::Cancel) {
      if (job.finished()) {  // left as it ended; the client says so
        Json j = job.to_json();
        j["already_ended"] = true;
        return reply_ok(j);
      }
      job.cancel_requested = true;
      job.add_log("cancel requested");
      if (!job.task.empty() && job.state == JobState::kRunning) {
        finish_task(job, JobState::kCancelled, "", "");
        return reply_ok(job.to_json());
      }
      if (job.state == JobState::kQueued) {
        queue_.erase(std::remove(queue_.begin(), queue_.end(), job.id), queue_.end());
        job.state = JobState::kCancelled;
        job.finished_at = unix_now();
        job.model.reset();  // a queued evaluation's model
      } else {
        for (const std::string& n : job.nodes)
          if (members_.count(n) && members_[n].alive)
            members_[n].outbox.push_back(cancel_frame(job.id));
      }
      save(job);
      return reply_ok(job.to_json());
    }
    return reply_error("request '" + request_kind_name(kind) + "' is not answered here",
                       "run the same dtrain release everywhere");
  } catch (const core::UserError& e) {
    return reply_error(e.what_happened(), e.fix());
  } catch (const std::exception& e) {  // a request of the wrong shape: refused, nothing kept
    return reply_error(std::string("the request could not be read: ") + e.what(),
                       "use dtrain-submit of this release");
  }
}

// `dtrain-submit stats JOB [--node N]`: the job's recorded steps and epochs. Read outside the
// controller's lock (the store has its own, and WAL lets reports be written meanwhile).
std::vector<uint8_t> Controller::stats_request(const ClientRequest& request) {
  const uint64_t job_id = request.job_id;
  const std::string& node = request.node;
  Json node_ids;  // the link rows name peers by node id
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!jobs_.count(job_id))
      return reply_error("no job " + job_id_text(job_id) + " on this controller",
                         "list the jobs with `dtrain-submit status`");
    node_ids = node_names_locked();
  }
  try {
    Json j = stats_->query(job_id_text(job_id), node);
    j["id"] = job_id_text(job_id);
    j["node_names"] = node_ids;
    return reply_ok(j);
  } catch (const std::exception& e) {
    return reply_error("the stats store could not be read: " + std::string(e.what()),
                       "check the controller's log and its data_dir/controller/stats.db");
  }
}

// {"<node id>": "<name>"}: stats' link rows name peers by id.
Json Controller::node_names_locked() const {
  Json ids = Json::object();
  for (const auto& [name, m] : members_) ids[std::to_string(m.id)] = name;
  return ids;
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
  const transport::MeshMap map = transport::MeshMap::build(job.mesh.empty() ? "plain" : job.mesh,
                                                           members);
  for (const transport::MeshMember& m : map.members())
    tree.push_back({{"node", names[m.id]},
                    {"parent", m.id == map.root() ? "" : names[m.parent]}});
  return tree;
}

// The dashboard's job page (daemon/README.md, "Dashboard"): the job, its log, its stats
// history (at most about kDashboardSteps step rows: it is fetched every second) and the nodes'
// names. Throws core::UserError for a job it does not have.
Json Controller::dashboard_job(uint64_t job_id) {
  constexpr int64_t kDashboardSteps = 6000;
  Json j;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end())
      throw core::UserError("no job " + job_id_text(job_id) + " on this controller",
                            "pick one from the job list");
    j = it->second.to_json();
    j["log"] = it->second.log;
    for (const auto& [name, r] : it->second.results)  // the model's size, for "vs dense"
      if (r.contains("params")) j["params"] = r["params"];
    j["mesh_tree"] = mesh_tree(it->second);
    j["node_names"] = node_names_locked();
  }
  j["stats"] = stats_->query(job_id_text(job_id), "", kDashboardSteps);
  return j;
}

void Controller::stop() {
  std::lock_guard<std::mutex> lock(mutex_);
  stopping_ = true;
  fetched_.notify_all();
  if (running_ != 0) {
    JobRecord& job = jobs_[running_];
    for (const std::string& n : job.nodes)
      if (members_.count(n)) members_[n].outbox.push_back(cancel_frame(job.id));
    job.state = JobState::kCancelled;
    job.error = "the controller was stopped";
    job.fix = job.resume_hint().empty() ? "submit the job again" : job.resume_hint();
    job.finished_at = unix_now();
    job.add_log("cancelled: the controller was stopped");
    save(job);
    running_ = 0;
  }
}

Json Controller::nodes_locked() {
  Json nodes = Json::array();
  const auto now = Clock::now();
  for (const auto& [name, m] : members_)
    nodes.push_back(
        {{"name", name}, {"id", m.id}, {"address", m.address}, {"data_port", m.data_port},
         {"data_lanes", m.data_lanes},
         {"cores", m.cores}, {"gpus", gpus_json(m.gpus)}, {"state", m.alive ? "alive" : "lost"},
         {"last_heard_seconds_ago", std::chrono::duration<double>(now - m.last_heard).count()},
         {"running_job", running_ != 0 && m.alive &&
                                 std::count(jobs_[running_].nodes.begin(),
                                            jobs_[running_].nodes.end(), name)
                             ? job_id_text(running_)
                             : ""}});
  // What a node or a client must speak to join or talk to this cluster, and where.
  const Json protocol = {{"control_version", transport::kControlVersion},
                         {"wire_version", transport::kWireVersion},
                         {"control_port", control_port_ ? control_port_.load()
                                                        : config_.control_port}};
  return {{"nodes", nodes}, {"protocol", protocol}};
}

Json Controller::jobs_locked() {
  Json jobs = Json::array();
  for (const auto& [id, job] : jobs_) jobs.push_back(job.to_json());
  std::sort(jobs.begin(), jobs.end(), [](const Json& a, const Json& b) {
    return a["submitted_at"].get<double>() < b["submitted_at"].get<double>();
  });
  return {{"jobs", jobs}};
}

Json Controller::nodes_json() {
  std::lock_guard<std::mutex> lock(mutex_);
  return nodes_locked();
}

Json Controller::jobs_json() {
  std::lock_guard<std::mutex> lock(mutex_);
  return jobs_locked();
}

}  // namespace dtrain::daemon
