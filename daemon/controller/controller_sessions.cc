// A node's session with the controller (docs/architecture/daemon.md, "Control conversations"): it
// registers, its frames go out and its reports come in until its connection ends, it falls
// silent for the peer timeout (lost), or it registers again (the new session replaces it).
#include <spdlog/spdlog.h>

#include <algorithm>

#include "daemon/controller/controller.h"

namespace dtrain::daemon {

using Clock = std::chrono::steady_clock;

namespace {

constexpr uint64_t kCountEvery = 32;  // frames read between the counts a node is sent

}  // namespace
using transport::ControlConnection;
using transport::ControlError;

void Controller::serve_node(ControlConnection& c, const NodeRegistration& node) {
  const std::optional<uint64_t> session = register_node(c, node);
  if (!session) return;
  spdlog::info("controller: node {} (id {}) registered from {}, data {}:{}, {} cores, {} GPUs",
               node.name, node.node_id, c.peer(), node.address, node.data_port, node.cores,
               node.gpus.size());
  c.send(reply_ok({{"node_id", node.node_id}, {"name", node.name}}));
  std::string why;
  try {
    why = node_session(c, node.name, *session);
  } catch (const ControlError& e) {
    why = std::string("its connection ended: ") + e.what();
  }
  if (why.empty()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  Member& m = members_.entry(node.name);
  if (Membership::holds(m, *session) && m.alive) node_lost(m, why);
}

std::optional<uint64_t> Controller::register_node(ControlConnection& c,
                                                  const NodeRegistration& node) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (const auto refusal = members_.refusal(node)) {
    c.send(reply_error(refusal->error, refusal->fix));
    return std::nullopt;
  }
  Member& m = members_.entry(node.name);
  if (m.alive && m.session != 0 && m.boot_id != node.boot_id) {
    // A new process before its old connection was seen to end: the old one is gone, with its
    // part of the running job (which it may now rejoin).
    node_lost(m, "it restarted");
  } else if (m.alive && m.session != 0) {
    spdlog::info("controller: node {} reconnected", node.name);
  }
  members_.admit(node);
  fetches_.wake();  // a fetch sent on its old session asks again
  stop_orphans(m, node.running_jobs);
  training_.on_registered(m, node.running_jobs);
  tasks_.on_registered(m, node.running_jobs);
  stop_dropped_parts(m, node.running_jobs);
  start_next();
  return m.session;
}

std::string Controller::node_session(ControlConnection& c, const std::string& name,
                                     uint64_t session) {
  const auto timeout = std::chrono::milliseconds(config_.peer_timeout_ms);
  // Frames read from the node in this session, and the count it was last told: it keeps every
  // report until it is counted, and resends the rest in its next session.
  uint64_t read = 0, told = 0;
  bool idle = true;  // the last wait found nothing to read
  for (;;) {
    std::deque<std::vector<uint8_t>> out;
    bool stop = false, held = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      Member& m = members_.entry(name);
      if (!Membership::holds(m, session)) return "";  // replaced by a newer registration
      training_.end_adoption_if_due();
      // Fenced out or abdicated: nothing more is sent (what the outbox holds is dropped).
      if (silenced_) return "";
      // An elected controller past its own count of its lease holds its frames: a renewal that
      // lands late lets them go, an ended term drops them.
      held = acts_ && !acts_();
      if (!held) out.swap(m.outbox);
      stop = stopping_;
      if (members_.silent(m, timeout))
        return "silent for " + std::to_string(config_.peer_timeout_ms) + " ms";
    }
    // The count every kCountEvery frames, and whenever the node has nothing more to send: one per
    // frame read would fill the connection while the node sends a backlog (it reads in turns).
    if (!held && read > told && (idle || read - told >= kCountEvery))
      out.push_back(received_frame(told = read));
    for (const auto& frame : out) c.send(frame);
    if (stop) return "";
    idle = !c.wait_readable(idle ? std::chrono::milliseconds(50) : std::chrono::milliseconds(0));
    if (idle) continue;
    JobMessageIn in;
    const bool job_message = read_job_message(c.receive(std::chrono::seconds(30)), in);
    ++read;
    std::lock_guard<std::mutex> lock(mutex_);
    Member& m = members_.entry(name);
    members_.heard(m);
    if (job_message) on_job_message_safely(m, in);
    else spdlog::warn("controller: ignored a malformed control frame from {}", name);
  }
}

// One malformed report (a field of the wrong type, say) fails that report, never the node's
// session: were it to end the session, the member would stay "alive" with nobody reading it.
void Controller::on_job_message_safely(Member& m, const JobMessageIn& in) {
  try {
    on_job_message(m, in);
  } catch (const FencedOut&) {
    throw;  // this controller's term ends (job_records.h)
  } catch (const std::exception& e) {
    spdlog::warn("controller: ignored a malformed '{}' report from {}: {}",
                 job_kind_name(in.kind), m.name, e.what());
  }
}

void Controller::on_job_message(Member& m, const JobMessageIn& in) {
  const uint64_t job_id = in.job_id;
  if (in.kind == JobKind::Heartbeat || job_id == 0) return;
  if (in.kind == JobKind::ModelChunk) return fetches_.on_chunk(m, in);
  JobRecord* found = store_.find(job_id);
  if (!found) return;
  JobRecord& job = *found;
  // A node speaks only about jobs it is a member of, and only reports.
  if (!listed(job.nodes, m.name) || in.kind == JobKind::Start || in.kind == JobKind::Cancel ||
      in.kind == JobKind::Rejoin || in.kind == JobKind::FetchModel || in.kind == JobKind::Task) {
    spdlog::warn("controller: node {} sent '{}' about job {}, which it is not a member of or "
                 "may not send: ignored", m.name, job_kind_name(in.kind), job_id_text(job_id));
    return;
  }
  // A restarted node that was never admitted may still report after the job ended.
  if (job.finished() && in.kind != JobKind::Log) return;
  if (!job.is_task()) return training_.on_report(job, m, in);
  if (!job.dropped(m.name)) tasks_.on_report(job, m, in);
}

// A node that trains a job this controller is not running (it restarted mid-job and marked the
// job failed, or never heard of it) is told to stop, so no orphan trains beside the next job.
void Controller::stop_orphans(Member& m, const std::vector<uint64_t>& running) {
  for (uint64_t id : running) {
    JobRecord* job = store_.find(id);
    // A running job's members keep it; anyone else (left out when it resumed) stops.
    if (scheduler_.running(id) && job && listed(job->nodes, m.name)) continue;
    m.send(cancel_frame(id));
    spdlog::warn("controller: node {} is still training job {}, which is not running here; "
                 "told it to stop", m.name, job_id_text(id));
    if (!job) continue;
    job->add_log("node " + m.name + " was still training it; told it to stop");
    store_.save(*job);
  }
}

// A part the node still runs of a running job that dropped it and did not take it back (the job
// is stopping, or cannot take nodes back) stops: the node is free for other jobs then.
void Controller::stop_dropped_parts(Member& m, const std::vector<uint64_t>& running) {
  for (uint64_t id : running) {
    JobRecord* job = store_.find(id);
    if (!job || job->is_task() || !scheduler_.running(id) || !job->dropped(m.name) ||
        listed(job->rejoining, m.name))
      continue;
    m.send(cancel_frame(id));
    job->add_log("node " + m.name + " still ran its part after the job dropped it; told it to "
                 "stop");
    store_.save(*job);
  }
}

void Controller::node_lost(Member& m, const std::string& why) {
  m.alive = false;
  fetches_.wake();  // a fetch waiting for it asks the next node
  spdlog::warn("controller: node {} lost: {}", m.name, why);
  for (uint64_t running : scheduler_.running_ids())
    if (JobRecord& job = *store_.find(running); listed(job.nodes, m.name))
      drop_from_job(job, m.name, why);
}

}  // namespace dtrain::daemon
