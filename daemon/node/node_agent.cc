#include "daemon/node/node_agent.h"

#include <sodium.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/train/test_fault.h"
#include "core/util/error.h"
#include "daemon/protocol/job_folder.h"
#include "daemon/protocol/control_frames.h"
#include "transport/endpoint/interface_select.h"

namespace dtrain::daemon {

using Clock = std::chrono::steady_clock;
using transport::ControlConnection;
using transport::ControlError;

namespace {

// A standby controller's answer to a registration (it named the leader, or that none leads).
struct StandbyRefusal : std::runtime_error {
  using std::runtime_error::runtime_error;
};

uint32_t load_or_draw_node_id(const std::string& data_dir) {
  const std::string path = data_dir + "/node_id";
  std::ifstream in(path);
  uint64_t id = 0;
  if (in >> id && id > 0 && id < 0xFFFFFFF0u) return static_cast<uint32_t>(id);
  uint32_t fresh = 0;
  while (fresh == 0 || fresh >= 0xFFFFFFF0u) randombytes_buf(&fresh, sizeof fresh);
  std::ofstream out(path, std::ios::trunc);
  out << fresh << "\n";
  if (!out)
    throw core::UserError("cannot write " + path,
                          "make data_dir (" + data_dir + ") writable for dtraind");
  return fresh;
}

// The data channel's datagram for data.mtu, checked against the interface's MTU (refused,
// naming both and the fix, when it would not fit; said when the MTU cannot be read).
size_t data_datagram(const DaemonConfig& config, const std::string& interface) {
  const size_t datagram = transport::datagram_for_mtu(size_t(config.data_mtu));
  const int interface_mtu = transport::interface_mtu(interface);
  if (interface_mtu == 0)
    spdlog::warn("node {}: cannot read the MTU of interface {}: data.mtu {} is not checked "
                 "against it", config.name, interface, config.data_mtu);
  transport::check_datagram_fits(interface, interface_mtu, int(config.data_mtu), datagram);
  if (config.data_mtu > 1500)
    spdlog::info("node {}: data.mtu {}: datagrams of up to {} bytes, which every switch between "
                 "the nodes must carry (docs/operations.md, \"Jumbo frames\")", config.name,
                 config.data_mtu, datagram);
  return datagram;
}

}  // namespace

NodeAgent::NodeAgent(const DaemonConfig& config, const transport::ClusterKey& key,
                     JobPartFactory start_part)
    : config_(config), key_(key), gpus_(usable_gpus(config)), start_part_(std::move(start_part)) {
  std::error_code ec;
  std::filesystem::create_directories(config_.data_dir, ec);
  node_id_ = load_or_draw_node_id(config_.data_dir);
  while (boot_id_ == 0) randombytes_buf(&boot_id_, sizeof boot_id_);
  const transport::InterfaceAddress chosen =
      transport::choose_interface(config_.data_network, config_.data_allow_excluded);
  address_ = chosen.address;
  transport::EndpointConfig ec_config;
  ec_config.node_id = node_id_;
  ec_config.bind_address = address_;
  ec_config.port = config_.data_port;
  ec_config.key = key_;
  // The data channel's datagrams carry the boot this process registers with, the one the
  // controller announces to its peers (they refuse any other).
  ec_config.boot_id = boot_id_;
  ec_config.peer_timeout = std::chrono::milliseconds(config_.peer_timeout_ms);
  ec_config.heartbeat_interval = std::chrono::milliseconds(config_.heartbeat_ms);
  ec_config.reassembly_bytes = size_t(config_.data_reassembly_mb) << 20;
  ec_config.tag_threads = size_t(config_.data_tag_threads);
  static_assert(DaemonConfig::kMaxDataLanes == transport::kMaxLanes, "data.lanes' bound");
  ec_config.lanes = size_t(config_.data_lanes);
  static_assert(DaemonConfig::kMaxDataMtu == transport::kLargestMtu &&
                    DaemonConfig::kMinDataMtu == transport::kSmallestMtu,
                "data.mtu's bounds");
  ec_config.max_datagram = data_datagram(config_, chosen.name);
  ec_config.faults = config_.data_faults;
  ec_config.credit_window = size_t(config_.data_credit_kb) << 10;
  ec_config.max_credit_window = size_t(config_.data_max_credit_kb) << 10;
  ec_config.receive_buffer_bytes = std::max({ec_config.receive_buffer_bytes,
                                             2 * ec_config.credit_window,
                                             ec_config.max_credit_window});
  channel_ = std::make_unique<DataChannel>(ec_config);
  if (const core::TestFault fault = core::TestFault::from_environment(); fault.active())
    spdlog::warn("node {}: DTRAIN_TEST_FAULT is set: {} on purpose "
                 "(a test of the controller's checks; never set it in production)",
                 config_.name, fault.description());
  if (const char* hold = std::getenv("DTRAIN_TEST_HOLD_PARTS"); hold && *hold)
    spdlog::warn("node {}: DTRAIN_TEST_HOLD_PARTS is set: evaluation and inference parts wait "
                 "until {} exists (a test's hook; never set it in production)",
                 config_.name, hold);
  if (config_.data_faults.active())
    spdlog::warn("node {}: data.faults is on: this node drops {:.1f}%, duplicates {:.1f}% and "
                 "reorders {:.1f}% of its datagrams on purpose (seed {}); for tests only",
                 config_.name, 100 * config_.data_faults.drop,
                 100 * config_.data_faults.duplicate, 100 * config_.data_faults.reorder,
                 config_.data_faults.seed);
  spdlog::info("node {} (id {}): data channel on interface {} ({}:{})", config_.name, node_id_,
               chosen.name, address_, channel_->endpoint().port());
  for (const auto& g : gpus_)
    spdlog::info("node {}: GPU {} ({}, {} MiB) available to jobs", config_.name, g.index, g.name,
                 g.memory_bytes >> 20);
  if (!start_part_)
    start_part_ = [this](uint64_t job_id, const StartMessage& start, PartReport report,
                         std::unique_ptr<JobPart> predecessor) -> std::unique_ptr<JobPart> {
      return std::make_unique<JobRunner>(config_, *channel_, node_id_, job_id, start,
                                         std::move(report), std::move(predecessor));
    };
}

NodeAgent::~NodeAgent() {
  stop_jobs();  // cancels and joins every runner before the data channel goes
  channel_.reset();
}

// Reports wait here while the controller is away (it may be for hours: a restarted controller
// adopts the job). Bounded: past kMaxOutbox, progress reports give way (each is superseded by
// the next), then the oldest stats reports and log lines, so results and failures are kept.
void NodeAgent::queue(uint64_t job_id, const NodeReport& report, uint64_t part) {
  const JobKind kind = report_kind(report);
  std::lock_guard<std::mutex> lock(mutex_);
  if (outbox_.size() + unacked_.size() >= kMaxOutbox) {
    if (kind == JobKind::Progress) return;
    // Progress first, then the oldest stats and log line; results and failures (a few per job)
    // stay.
    for (JobKind give_way : {JobKind::Progress, JobKind::Stats, JobKind::Log}) {
      auto it = std::find_if(outbox_.begin(), outbox_.end(),
                             [&](const Queued& q) { return q.kind == give_way; });
      if (it == outbox_.end()) continue;
      outbox_.erase(it);
      break;
    }
    if (outbox_.size() + unacked_.size() >= kMaxOutbox &&
        (kind == JobKind::Log || kind == JobKind::Stats))
      return;
  }
  outbox_.push_back({kind, report_frame(job_id, report, part)});
}

// Sends what waits for the controller. A sent frame is kept until the controller has counted
// it (Received): a frame the kernel took may still die with the connection, and then goes out
// again in the next session (requeue_unacknowledged).
// At most `most` frames (0: all), so that a long backlog leaves room to read the controller's
// counts in between. A frame moves to unacked_ before it is sent (a report queued meanwhile may
// make room in the outbox, which must not be the frame on its way); a model chunk is not kept
// (a later session's controller has no request waiting for it).
void NodeAgent::send_outbox(transport::ControlConnection& c, std::chrono::milliseconds timeout,
                            size_t most) {
  for (size_t n = 0; most == 0 || n < most; ++n) {
    std::vector<uint8_t> frame;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (outbox_.empty()) return;
      Queued next = std::move(outbox_.front());
      outbox_.pop_front();
      if (next.kind == JobKind::ModelChunk) {
        frame = std::move(next.frame);
        ++sent_;
      } else {
        frame = next.frame;
        unacked_.push_back({sent_++, std::move(next)});
      }
    }
    c.send(frame, timeout);
  }
}

void NodeAgent::send_heartbeat(transport::ControlConnection& c) {
  c.send(heartbeat_frame());
  std::lock_guard<std::mutex> lock(mutex_);
  ++sent_;  // counted by the controller like any frame, kept by no one
}

void NodeAgent::acknowledged(uint64_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  while (!unacked_.empty() && unacked_.front().number < count) unacked_.pop_front();
}

void NodeAgent::requeue_unacknowledged() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = unacked_.rbegin(); it != unacked_.rend(); ++it)
    outbox_.push_front(std::move(it->frame));
  unacked_.clear();
  sent_ = 0;
}

void NodeAgent::on_job_message_safely(const JobMessageIn& m) {
  try {
    on_job_message(m);
  } catch (const std::exception& e) {
    spdlog::error("node {}: a {} message for job {} failed here: {}", config_.name,
                  control::EnumNameJobKind(m.kind), job_id_text(m.job_id), e.what());
    if (m.kind == JobKind::Start)
      queue(m.job_id,
            FailedReport{int32_t(m.start.rank),
                         std::string("the node could not start its part: ") + e.what(),
                         "see this node's log (journalctl -u dtraind)", false},
            m.start.part);
  }
}

void NodeAgent::on_job_message(const JobMessageIn& m) {
  const uint64_t job_id = m.job_id;
  std::lock_guard<std::mutex> lock(jobs_mutex_);
  auto it = jobs_.find(job_id);
  if (m.kind == JobKind::Start) {
    std::unique_ptr<JobPart> dropped;
    if (it != jobs_.end()) {
      // A repeat, unless it rejoins or resumes (the old part still winds down: it stops).
      if (!m.start.rejoin && m.start.resume_epoch < 0) return;
      // The job dropped this node while it was away (paused, cut off: the same process) and
      // takes it back, or goes on from a checkpoint: its old part stops for the new one.
      spdlog::warn("node {}: job {} starts again here ({}); its earlier part stops",
                   config_.name, job_id_text(job_id), m.start.rejoin ? "rejoin" : "resume");
      dropped = std::move(it->second);
    } else {
      spdlog::info("node {}: starting job {}", config_.name, job_id_text(job_id));
    }
    jobs_[job_id] = start_part_(
        job_id, m.start,
        [this, job_id](const NodeReport& report, uint64_t part) { queue(job_id, report, part); },
        std::move(dropped));
  } else if (m.kind == JobKind::DataPlan) {
    if (it != jobs_.end()) it->second->plan(m.plan);
  } else if (m.kind == JobKind::Task) {
    on_task(job_id, m.task);
  } else if (m.kind == JobKind::Cancel) {
    if (auto task = tasks_.find(job_id); task != tasks_.end()) task->second->cancel();
    if (it == jobs_.end()) return;
    spdlog::info("node {}: cancelling job {}", config_.name, job_id_text(job_id));
    it->second->cancel();
  } else if (m.kind == JobKind::FetchModel) {
    // dtrain-submit fetch: a chunk of a finished job's model, from that job's folder here.
    // A job of a release before job folders has its model in data_dir/models/.
    std::string folder = job_folder(config_.data_dir, job_id);
    std::error_code unreadable;
    if (!std::filesystem::is_directory(folder, unreadable)) folder = config_.data_dir + "/models";
    const ChunkMessage chunk = read_model_chunk(folder, m.fetch);
    if (!chunk.error.empty())
      spdlog::warn("node {}: fetch of job {}'s model: {}", config_.name, job_id_text(job_id),
                   chunk.error);
    std::lock_guard<std::mutex> out(mutex_);
    outbox_.push_back({JobKind::ModelChunk, chunk_frame(job_id, chunk)});
  } else if (m.kind == JobKind::Rejoin) {
    // A lost member of this job restarted and is coming back (docs/architecture/daemon.md, "Lost
    // and restarted members"): its new boot is the one to take datagrams from.
    if (m.rejoin.boot != 0) channel_->endpoint().announce_boot(m.rejoin.id, m.rejoin.boot);
    if (it != jobs_.end()) it->second->rejoin(m.rejoin);
  } else if (m.kind != JobKind::Heartbeat) {
    spdlog::warn("node {}: ignored a '{}' message from the controller", config_.name,
                 job_kind_name(m.kind));
  }
}

void NodeAgent::on_task(uint64_t job_id, const TaskMessage& task) {
  auto it = tasks_.find(job_id);
  if (it != tasks_.end() && !it->second->done()) {
    it->second->add_parts(task);  // its parts of a node-local plan, a lost node's, or a repeat
    return;
  }
  spdlog::info("node {}: {} job {}: {} of its {} parts here", config_.name, task_kind_word(task.kind),
               job_id_text(job_id), task.parts.size(), task.part_count);
  tasks_[job_id] = std::make_unique<TaskRunner>(
      config_, job_id, task,
      [this, job_id](const NodeReport& report) { queue(job_id, report); });
}

// What this node tells the controller when it registers: who it is, where its data channel
// listens, what it offers, and the jobs it still runs (a restarted controller adopts them).
NodeRegistration NodeAgent::registration() {
  NodeRegistration me;
  me.node_id = node_id_;
  me.boot_id = boot_id_;
  me.name = config_.name;
  me.address = address_;
  me.data_port = channel_->endpoint().port();
  me.data_lanes = uint8_t(channel_->endpoint().lanes());
  me.data_mtu = uint16_t(config_.data_mtu);
  me.cores = std::max(1u, std::thread::hardware_concurrency());
  me.gpus = registration_gpus(gpus_);
  std::lock_guard<std::mutex> lock(jobs_mutex_);
  for (const auto& [id, job] : jobs_)
    if (!job->done()) me.running_jobs.push_back(id);
  for (const auto& [id, task] : tasks_)
    if (!task->done()) me.running_jobs.push_back(id);
  return me;
}

void NodeAgent::forget_finished_parts() {
  std::lock_guard<std::mutex> lock(jobs_mutex_);
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (it->second->done()) it = jobs_.erase(it);
    else ++it;
  }
  for (auto it = tasks_.begin(); it != tasks_.end();) {
    if (it->second->done()) it = tasks_.erase(it);
    else ++it;
  }
}

// The controller the next session tries: the leader a standby named, else the next listed.
ControllerAddress NodeAgent::next_controller() {
  ControllerAddress at{config_.controller_host, config_.controller_port};
  if (!config_.controllers.empty())
    at = config_.controllers[controller_at_ % config_.controllers.size()];
  if (!leader_hint_.empty()) {
    if (const std::optional<ControllerAddress> hint = parse_host_port(leader_hint_)) at = *hint;
    leader_hint_.clear();
  }
  return at;
}

void NodeAgent::session(const std::atomic<bool>& stop) {
  const ControllerAddress at = next_controller();
  auto c = ControlConnection::connect(at.host, at.port, key_, std::chrono::seconds(10));
  const std::string controller = c->peer();
  c->send(register_frame(registration()));
  const std::vector<uint8_t> reply_bytes = c->receive(std::chrono::seconds(10));
  const auto& reply = read_control_frame(reply_bytes);
  const auto* r = reply.body_as_Reply();
  if (r && !r->ok() && r->leader()) {  // a standby: its leader next, if it knows one
    leader_hint_ = r->leader()->str();
    throw StandbyRefusal(r->error() ? r->error()->str() : "a standby controller");
  }
  if (!r || !r->ok())
    throw core::UserError("the controller at " + controller + " refused this node: " +
                              (r && r->error() ? r->error()->str() : "no reply"),
                          r && r->fix() ? r->fix()->str() : "check the controller's log");
  spdlog::info("node {}: registered with the controller at {}", config_.name, controller);
  // Whatever this session sent that the controller did not count goes out again in the next.
  struct Requeue {
    NodeAgent& agent;
    ~Requeue() { agent.requeue_unacknowledged(); }
  } requeue{*this};
  connected_ = true;
  serve_session(*c, stop);
  // Stopping: jobs are told (cancelled) and the controller hears it before the connection goes.
  connected_ = false;
  stop_jobs();
  send_outbox(*c, std::chrono::seconds(2));
}

void NodeAgent::serve_session(ControlConnection& c, const std::atomic<bool>& stop) {
  auto last_heartbeat = Clock::time_point{};
  const auto heartbeat = std::chrono::milliseconds(config_.heartbeat_ms);
  // With standby controllers: a live controller counts the heartbeats (a Received frame about
  // every heartbeat), so one that sends nothing for twice the peer timeout is stopped or cut
  // off, and another may lead by now. (One controller is waited for, however long it is busy.)
  const auto silence = std::chrono::milliseconds(2 * config_.peer_timeout_ms);
  const bool standbys = config_.controllers.size() > 1;
  auto heard = Clock::now();
  while (!stop) {
    if (standbys && Clock::now() - heard > silence)
      throw ControlError(ControlError::Kind::kTimeout,
                         "the controller at " + c.peer() + " sent nothing for " +
                             std::to_string(2 * config_.peer_timeout_ms) + " ms",
                         "check that controller; this node tries the others");
    send_outbox(c, std::chrono::seconds(10), kFramesPerTurn);
    if (Clock::now() - last_heartbeat >= heartbeat) {
      send_heartbeat(c);
      last_heartbeat = Clock::now();
    }
    forget_finished_parts();
    // Everything the controller sent so far (a backlog's counts among it), then a short wait.
    for (auto wait = std::chrono::milliseconds(50); c.wait_readable(wait);
         wait = std::chrono::milliseconds(0)) {
      JobMessageIn m;
      const std::vector<uint8_t> frame = c.receive(std::chrono::seconds(30));
      heard = Clock::now();
      if (!read_job_message(frame, m))
        spdlog::warn("ignored a malformed control frame from the controller");
      else if (m.kind == JobKind::Received)
        acknowledged(m.received);
      else
        on_job_message_safely(m);
    }
  }
}

void NodeAgent::run(const std::atomic<bool>& stop) {
  std::string last_error;
  while (!stop) {
    try {
      session(stop);
      return;
    } catch (const std::exception& e) {
      connected_ = false;
      // Jobs keep running while the controller is away; their reports wait in the outbox. One
      // line for standbys that know no leader, not one per standby and round.
      const bool no_leader = dynamic_cast<const StandbyRefusal*>(&e) && leader_hint_.empty();
      const std::string what = no_leader ? "no controller leads" : e.what();
      if (what != last_error)
        spdlog::warn("node {}: controller session: {} (retrying{})", config_.name, e.what(),
                     config_.controllers.size() > 1 ? " the controllers in turn" : " every 2 s");
      last_error = what;
    }
    // With one controller, it again after 2 s (it may be back). With several, the next one (a
    // silent controller may be stopped, and would hold a connection up for its whole timeout):
    // a named leader at once, the rest of a round after 200 ms, a new round after 2 s.
    const size_t n = std::max<size_t>(1, config_.controllers.size());
    if (n > 1) ++controller_at_;
    // One hop to a named leader at once; a second in a row (standbys naming each other from
    // stale reads) waits like the rest of a round.
    const bool hop = !leader_hint_.empty() && !hopped_;
    hopped_ = !leader_hint_.empty();
    const int waits = hop ? 0 : n == 1 || controller_at_ % n == 0 ? 20 : 2;
    for (int i = 0; i < waits && !stop; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  stop_jobs();
}

void NodeAgent::stop_jobs() {
  std::map<uint64_t, std::unique_ptr<JobPart>> jobs;
  std::map<uint64_t, std::unique_ptr<TaskRunner>> tasks;
  {
    std::lock_guard<std::mutex> lock(jobs_mutex_);
    jobs.swap(jobs_);
    tasks.swap(tasks_);
  }
  for (auto& [id, job] : jobs) job->cancel();
  for (auto& [id, task] : tasks) task->cancel();
  jobs.clear();  // joins them
  tasks.clear();
}

Json NodeAgent::status() {
  Json j = {{"name", config_.name}, {"id", node_id_}, {"data_address", address_},
            {"data_port", channel_->endpoint().port()}, {"data_lanes", channel_->endpoint().lanes()},
            {"data_mtu", config_.data_mtu},
            {"controller_connected", bool(connected_)},
            {"jobs", Json::array()}, {"peers", Json::array()}, {"gpus", Json::array()},
            // data.tag_threads, and how much of the tagging they took
            // (docs/architecture/transport.md)
            {"tag_threads", channel_->endpoint().tag_threads()},
            {"data_faults", config_.data_faults.active()},
            {"tags_on_workers", channel_->endpoint().tags_on_workers()}};
  // Memory in use: what dtrain's GPU workers hold, now (kernels::list_gpus).
  for (const kernels::GpuInfo& g : kernels::list_gpus())
    for (const kernels::GpuInfo& mine : gpus_)
      if (mine.index == g.index)
        j["gpus"].push_back({{"index", g.index}, {"name", g.name}, {"memory_bytes", g.memory_bytes},
                             {"memory_used_bytes", g.memory_used_bytes}});
  {
    std::lock_guard<std::mutex> lock(jobs_mutex_);
    for (const auto& [id, job] : jobs_)
      if (!job->done()) j["jobs"].push_back(job->snapshot());
    for (const auto& [id, task] : tasks_)
      if (!task->done()) j["jobs"].push_back(task->snapshot());
  }
  for (const auto& [peer, c] : channel_->endpoint().counters()) {
    // Datagrams from senders that are not members (or did not authenticate) count under
    // "unknown": their drops are what an attack looks like.
    const Json who = peer == transport::Endpoint::kUnknownSender ? Json("unknown") : Json(peer);
    Json p = {{"peer", who}, {"datagrams_in", c.datagrams_in}, {"bytes_in", c.bytes_in},
              {"datagrams_out", c.datagrams_out}, {"bytes_out", c.bytes_out},
              {"messages_in", c.messages_in}, {"messages_out", c.messages_out},
              {"naks_sent", c.naks_sent}, {"naks_received", c.naks_received},
              {"retransmits", c.retransmits}, {"credit_stalls", c.credit_stalls},
              {"duplicates", c.duplicates}, {"rtt_us", c.rtt_us}, {"lost", c.lost},
              {"credit_offered", c.credit_offered},
              {"drops", Json::object()}};
    if (peer != transport::Endpoint::kUnknownSender) p["aead"] = transport::aead_name(c.aead);
    for (size_t r = 0; r < c.drops.size(); ++r)
      if (c.drops[r]) p["drops"][transport::drop_reason_name(static_cast<transport::DropReason>(r))] = c.drops[r];
    j["peers"].push_back(p);
  }
  return j;
}

}  // namespace dtrain::daemon
