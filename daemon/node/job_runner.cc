#include "daemon/node/job_runner.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "core/model/model_builder.h"
#include "core/spec/job_spec_parser.h"
#include "core/train/batch_split.h"
#include "core/train/checkpoints.h"
#include "core/train/data_memory.h"
#include "core/train/training_run.h"
#include "core/train/local_steps.h"
#include "core/train/step_timing.h"
#include "core/train/mode_choice.h"
#include "core/train/sync_choice.h"
#include "core/train/sync_workloads.h"
#include "core/train/test_fault.h"
#include "daemon/protocol/job_folder.h"
#include "kernels/backend.h"
#include "kernels/node_collective.h"
#include "daemon/node/local_shards.h"
#include "daemon/node/mesh_exchange.h"
#include "daemon/node/stats_recorder.h"
#include "daemon/protocol/model_fetch.h"
#include "daemon/protocol/node_reports_json.h"
#include "daemon/protocol/part_scores.h"

namespace dtrain::daemon {
namespace {

using Clock = std::chrono::steady_clock;

// At most this many evenly spaced parameters go to the controller for the replica check.
constexpr int64_t kParamSample = 65536;

// Local steps' state as the logs print it, so that a resume is checked bit for bit against the
// checkpoint it read (tests/cluster/resume_test.sh).
std::string local_steps_state(const std::vector<float>& momentum,
                              const std::vector<float>& residual) {
  return ", outer momentum sha256 " + floats_sha256(momentum.data(), momentum.size()) +
         ", residual sha256 " + floats_sha256(residual.data(), residual.size());
}

// What the nodes rehearse before the chooser chooses (sync_rehearsal.h).
RehearsalPlanPayload rehearsal_plan(const core::TrainingSpec& training,
                                    const core::SyncChoiceInputs& in) {
  RehearsalPlanPayload plan;
  plan.steps = core::rehearsal_steps(training, in);
  plan.step_bytes = uint64_t(std::min(core::node_step_bytes(training, in),
                                      double(kMaxRehearsalBytes)));
  plan.round_bytes = uint64_t(std::min(in.round_bytes, double(kMaxRehearsalBytes)));
  if (core::mode_is_auto(training)) plan.ring_steps = core::rehearsal_ring_steps(in);
  return plan;
}

// A ring like a step of mode allreduce sums (GradientRounds: the parameters, then the step's
// examples and its workers with more): its size, and with precision bf16 its parts as bf16
// (the two counts exact; core/collective/ring_wire.h). Returns the sums' size.
int64_t set_up_ring(const core::JobSpec& job, MeshExchange& exchange) {
  const int64_t params = core::count_model(job.model).params;
  exchange.expect_sums_of(core::step_sum_values(params));
  if (job.training.precision == kernels::Precision::kBf16)
    exchange.set_ring_wire({true, core::kStepFigures});
  return core::step_sum_values(params);
}

// The compute threads this node's part of a job may use: the node's `threads` (0: every core),
// or for a share of the node (training.cores_per_node) its cores, no more than `threads`.
int job_threads(int64_t node_threads, uint32_t share_cores) {
  if (share_cores == 0) return int(node_threads);
  share_cores = std::min(share_cores, std::max(1u, std::thread::hardware_concurrency()));
  return int(node_threads > 0 ? std::min<int64_t>(node_threads, share_cores) : share_cores);
}

}  // namespace

// Progress to the controller (each step's figures at most every 300 ms, and each epoch) and
// the latest figures per worker for /metrics.
class JobRunner::ProgressReporter : public core::TrainingListener {
 public:
  ProgressReporter(std::string job, int rank, std::function<void(const NodeReport&)> report)
      : job_(std::move(job)),
        rank_(rank),
        report_(std::move(report)),
        stats_([this](const StatsReport& rows) { report_(rows); }) {}

  // The stats history's stride: from the job's length in worker steps, once the data is in.
  void plan_stats(int64_t epochs, int64_t per_worker_batch) {
    epochs_ = epochs;
    per_worker_batch_ = std::max<int64_t>(1, per_worker_batch);
  }
  void on_data_loaded(int64_t train_examples, int64_t, int64_t) override {
    stats_.set_stride(StatsRecorder::stride_for(
        epochs_ * ((train_examples + per_worker_batch_ - 1) / per_worker_batch_)));
  }
  StatsRecorder& stats() { return stats_; }
  void on_gpu_sharing(const std::string& how) override {
    report_(LogReport{"sharing between this node's GPU workers: " + how});
  }
  void on_allreduce_plan(const std::string& how) override {
    report_(LogReport{"allreduce: a step's gradient goes in " + how});
  }

  void on_worker_step(int worker, const core::WorkerStep& step) override {
    stats_.on_worker_step(worker, step);
    if (!step.sharing) return;
    const core::CodecStepStats& c = step.codec;
    const int64_t iteration = step.iteration;
    std::lock_guard<std::mutex> lock(mutex_);
    Json& w = workers_[worker];
    w["worker"] = worker;
    w["iteration"] = iteration + 1;
    w["tau"] = c.tau;
    w["density"] = c.density;
    w["encoding"] = core::encoding_name(c.encoding);
    w["residual_norm"] = c.residual_norm;
    w["message_bytes_total"] = w.value("message_bytes_total", int64_t(0)) + c.message_bytes;
    w["messages_total"] = w.value("messages_total", int64_t(0)) + c.messages;
  }

  Json snapshot() {
    std::lock_guard<std::mutex> lock(mutex_);
    Json j = {{"progress", latest_}, {"workers", Json::array()}};
    for (const auto& [w, figures] : workers_) j["workers"].push_back(figures);
    return j;
  }

  void on_step(const core::StepProgress& p) override {
    if (fault_.kind == core::TestFault::Kind::kSlowSteps)
      std::this_thread::sleep_for(std::chrono::milliseconds(fault_.at));
    if (fault_.exits_at(p.epoch, p.iteration_in_epoch, p.iterations_per_epoch)) {
      spdlog::warn("job {}: DTRAIN_TEST_FAULT: this daemon ends itself with SIGKILL at minibatch "
                   "{} of {} in epoch {}", job_, p.iteration_in_epoch + 1,
                   p.iterations_per_epoch, p.epoch + 1);
      spdlog::default_logger()->flush();
      std::raise(SIGKILL);
    }
    const auto now = Clock::now();
    if (now - last_ < std::chrono::milliseconds(300)) return;
    last_ = now;
    ProgressReport r;
    r.rank = uint32_t(rank_);
    r.epoch = p.epoch + 1;
    r.epochs = p.epochs;
    r.iteration = p.iteration + 1;
    r.iteration_in_epoch = p.iteration_in_epoch + 1;
    r.iterations_per_epoch = p.iterations_per_epoch;
    r.loss = p.loss;
    r.samples_per_sec = p.samples_per_sec;
    r.eta_seconds = p.eta_seconds;
    r.workers = int32_t(p.workers);
    r.sharing = p.sharing;
    if (p.sharing) {
      r.tau = p.codec.tau;
      r.density = p.codec.density;
      r.encoding = core::encoding_name(p.codec.encoding);
      r.message_kb = p.codec.message_bytes / 1024.0;
    }
    r.accuracy = accuracy_;
    r.diverging = p.diverging;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      latest_ = progress_json(r);
    }
    report_(r);
  }

  void on_epoch_checkpoint(const std::string& path, int64_t next_epoch,
                           const core::ModelFile& written) override {
    // In the node's log: what a resume from this file must start from, bit for bit.
    spdlog::info("job {}: checkpoint {}: parameters sha256 {}{}", job_, path,
                 floats_sha256(written.params.data(), written.params.size()),
                 written.has_local_steps
                     ? local_steps_state(written.outer_momentum, written.residual)
                     : std::string());
    report_(CheckpointReport{next_epoch, path});
  }

  void on_start(const core::StartPoint& start) override {
    if (!start.restored) return;
    report_(LogReport{"epoch " + std::to_string(start.epoch + 1) + " starts from parameters "
                      "sha256 " + floats_sha256(start.params, size_t(start.num_params)) +
                      (start.outer_momentum.empty()
                           ? std::string()
                           : local_steps_state(start.outer_momentum, start.local_residual))});
  }

  void on_epoch(const core::EpochSummary& s) override {
    stats_.on_epoch(s);
    training_seconds_ += s.seconds;
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.2f", training_seconds_);
    std::string line = "epoch " + std::to_string(s.epoch + 1) + ": train loss " +
                       std::to_string(s.train_loss) + ", " +
                       std::to_string(static_cast<int64_t>(s.samples_per_sec)) + " samples/s, " +
                       std::to_string(std::lround(100 * s.compute_share)) + "% computing, " +
                       seconds + " s of training";
    char replica[80];  // the replicas must agree at every epoch end (tests compare them)
    std::snprintf(replica, sizeof replica, ", replica %.9e/%.9e", s.replica.norm,
                  s.replica.projection);
    line += replica;
    if (s.takeover_batches > 0)
      line += ", did " + std::to_string(s.takeover_batches) +
              " minibatches of lost nodes or vacant slots";
    if (s.skipped_batches > 0)
      line += ", skipped " + std::to_string(s.skipped_batches) +
              " minibatches of lost nodes (their local data is on no other node)";
    if (s.missed_batches > 0)
      line += ", missed the updates of " + std::to_string(s.missed_batches) +
              " minibatches of lost nodes that other nodes applied (in flight when they were lost)";
    if (s.averaged_densely) line += ", replicas differed: averaged densely";
    if (s.evaluated) {
      accuracy_ = s.eval.accuracy();  // -1 for a regression model: left out of the progress
      line += s.eval.is_regression() ? ", test loss " + std::to_string(s.eval.mean_loss())
                                     : ", test accuracy " + std::to_string(accuracy_);
    }
    report_(LogReport{line});
  }

 private:
  std::string job_;  // its id, for the node's log
  int rank_;
  const core::TestFault fault_ = core::TestFault::from_environment();  // a test's, never set
  std::function<void(const NodeReport&)> report_;
  Clock::time_point last_{};
  double accuracy_ = -1;
  double training_seconds_ = 0;  // evaluation excluded
  int64_t epochs_ = 1, per_worker_batch_ = 1;
  StatsRecorder stats_;
  std::mutex mutex_;
  Json latest_ = Json::object();
  std::map<int, Json> workers_;
};

JobRunner::JobRunner(const DaemonConfig& config, DataChannel& channel, uint32_t self,
                     uint64_t job_id, StartMessage start, Report report,
                     std::unique_ptr<JobPart> predecessor)
    : config_(config),
      channel_(channel),
      self_(self),
      job_id_(job_id),
      start_(std::move(start)),
      report_([this, report = std::move(report)](const NodeReport& r) {
        if (!dropped_) report(r, start_.part);
      }),
      progress_(std::make_unique<ProgressReporter>(job_id_text(job_id), int(start_.rank),
                                                   report_)),
      predecessor_(std::move(predecessor)) {
  if (predecessor_) predecessor_->drop();
  thread_ = std::thread([this] { run(); });
}

Json JobRunner::snapshot() const {
  Json j = progress_->snapshot();
  j["id"] = job_id_text(job_id_);
  j["name"] = start_.name;
  j["rank"] = start_.rank;
  return j;
}

JobRunner::~JobRunner() {
  cancel();
  if (thread_.joinable()) thread_.join();
}

void JobRunner::rejoin(const RejoinMessage& r) {
  std::lock_guard<std::mutex> lock(exchange_mutex_);
  if (exchange_) return apply(*exchange_, r);
  if (!done_ && early_rejoins_.size() < 4096) early_rejoins_.push_back(r);
}

// A rejoin this node cannot use (a newcomer's address that is not an IP) is logged and left
// out: it must not end the caller, the control conversation or the job's own thread.
void JobRunner::apply(MeshExchange& exchange, const RejoinMessage& r) {
  try {
    if (r.withdrawn) return exchange.on_withdrawn(r.id);
    if (!r.member) return exchange.on_rejoin(r.id);
    exchange.on_join(r.slot, r.id, r.member->name,
                     {r.member->id, r.member->address, r.member->port, 0});
  } catch (const std::exception& e) {
    spdlog::error("job {}: a rejoin of node {} could not be applied: {}", job_id_text(job_id_),
                  r.id, e.what());
  }
}

void JobRunner::plan(const DataPlanMessage& plan) {
  {
    std::lock_guard<std::mutex> lock(plan_mutex_);
    plan_ = plan;
  }
  plan_arrived_.notify_all();
}

core::NodeLocalData JobRunner::await_data_plan(const core::JobSpec& job,
                                               std::chrono::milliseconds deadline) {
  const std::vector<ShardFile> listed =
      list_local_shards(job.data.train.shards, config_.name, input_roots());
  report_(ShardsReport{listed});
  DataPlanMessage plan;
  {
    std::unique_lock<std::mutex> lock(plan_mutex_);
    const bool arrived = plan_arrived_.wait_for(lock, deadline, [&] { return plan_ || cancel_; });
    if (cancel_) throw core::UserError("the job was cancelled", "");
    if (!arrived)
      throw core::UserError("no data plan from the controller within " +
                                std::to_string(deadline.count()) + " ms of listing this node's " +
                                std::to_string(listed.size()) + " data.train.shards files",
                            "check the controller's log and the other nodes (dtrain-submit nodes)");
    plan = *plan_;
  }
  core::NodeLocalData local;
  local.files = std::move(plan.files);
  local.member_examples = std::move(plan.member_examples);
  local.self = int(start_.rank);
  for (const JobMemberInfo& m : start_.members) local.member_workers.push_back(m.workers);
  std::map<std::string, int64_t> records;
  for (const ShardFile& l : listed) records[l.path] = l.examples;
  int64_t examples = 0;
  for (const std::string& f : local.files) {
    auto it = records.find(f);
    // The controller may only name what this node listed: nothing else is read.
    if (it == records.end())
      throw core::UserError("the data plan names '" + f + "', which this node did not list",
                            "run the same dtrain release on every node");
    examples += it->second;
  }
  if (local.member_examples.size() != start_.members.size() || local.files.empty() ||
      local.member_examples[start_.rank] != examples)
    throw core::UserError("the data plan does not fit this node's part of the job (" +
                              std::to_string(local.files.size()) + " files, " +
                              std::to_string(examples) + " examples)",
                          "run the same dtrain release on every node");
  report_(LogReport{"trains from " + std::to_string(local.files.size()) +
                    " of its data.train.shards files (" + std::to_string(examples) +
                    " examples)"});
  return local;
}

void JobRunner::drop() {
  dropped_ = true;
  cancel();
}

void JobRunner::cancel() {
  {
    std::lock_guard<std::mutex> lock(plan_mutex_);  // a wait for the data plan ends too
    cancel_ = true;
  }
  plan_arrived_.notify_all();
  std::lock_guard<std::mutex> lock(exchange_mutex_);
  if (exchange_) exchange_->cancel();
}

// ---- run(): join the job's mesh, train, report ----

namespace {

// The job's members as the mesh and the exchange need them: every member, the ones with an
// address (the mesh), and the elastic slots no node has taken (in no mesh).
struct MemberLists {
  std::vector<JobMember> members;
  std::vector<transport::MeshMember> mesh;
  std::vector<uint32_t> vacant;
};

MemberLists member_lists(const StartMessage& start) {
  MemberLists out;
  for (const JobMemberInfo& m : start.members) {
    out.members.push_back({m.id, m.name, m.workers});
    if (m.address.empty())
      out.vacant.push_back(m.id);
    else
      out.mesh.push_back({m.id, m.address, m.port, 0});
  }
  return out;
}

}  // namespace

std::chrono::milliseconds JobRunner::peer_timeout() const {
  return std::chrono::milliseconds(std::clamp<int64_t>(start_.peer_timeout_ms, 500, 600000));
}

std::chrono::milliseconds JobRunner::barrier_deadline() const {
  return std::chrono::milliseconds(std::max<int64_t>(120000, 6 * peer_timeout().count()));
}

void JobRunner::run() {
  if (predecessor_) {
    predecessor_.reset();  // stopped and joined: it leaves the job's mesh before this one joins
    spdlog::info("job {}: this node's dropped part stopped; rejoining", job_id_text(job_id_));
  }
  try {
    join_and_train();
  } catch (const core::UserError& e) {
    fail(e.what_happened(), e.fix());
  } catch (const std::exception& e) {
    fail(std::string("this node could not join the job's mesh: ") + e.what(),
         "run the same dtrain release on every machine; see the node's log (journalctl -u "
         "dtraind)");
  }
  done_ = true;
}

// What train_local reads, kept alive for its run: the node's form of the spec, the options, and
// what the options point at.
struct JobRunner::TrainingInputs {
  core::JobSpec job;    // as submitted
  core::JobSpec local;  // this node's: its workers, a checkpoint to resume
  core::LocalTrainingOptions options;
  core::ResumePoint checkpoint;
  core::NodeLocalData local_data;
  std::vector<float> final_params;
};

void JobRunner::join_and_train() {
  const MemberLists lists = member_lists(start_);
  bool listed_self = false;
  for (const transport::MeshMember& m : lists.mesh) listed_self = listed_self || m.id == self_;
  if (!listed_self)
    throw core::UserError("the job's start message does not list this node (id " +
                              std::to_string(self_) + ") among its members",
                          "run the same dtrain release on every machine");
  // Peers' datagrams are taken only from the boot the controller registered for them.
  for (const JobMemberInfo& m : start_.members)
    if (!m.address.empty() && m.boot != 0 && m.id != self_)
      channel_.endpoint().announce_boot(m.id, m.boot);
  MeshExchange exchange(job_id_, self_, lists.members, barrier_deadline());
  watch(exchange, lists.members);
  exchange.set_vacant(lists.vacant);
  TrainingInputs in;
  // A node new to a running job (restarted, or joining a vacant slot) reads its spec, checks its
  // inputs and (node-local data) waits for its data plan before it joins the mesh: the others
  // hear of it only once it reports Attached, so links made before would count their silence
  // meanwhile and declare live peers lost. (Its dataset is read in training, after Attached.)
  if (start_.rejoin && !fails_part_on_throw([&] { load_inputs(in, exchange, lists.members); }))
    return;
  transport::MeshNode mesh(channel_.endpoint(), mesh_map(exchange, lists.mesh),
                           mesh_handlers(exchange));
  JobMesh job_mesh(mesh, job_id_);
  exchange.set_mesh(&job_mesh);
  // However this part ends, an exception included, nothing outlives the exchange: the pointer
  // cancel() and rejoin() reach it by, the sync choice's repeats, the channel's route to the mesh.
  struct Unexpose {
    JobRunner& runner;
    MeshExchange& exchange;
    ~Unexpose() {
      runner.expose(nullptr);
      exchange.sync_election().finish();
      runner.channel_.detach(runner.job_id_);
    }
  } unexpose{*this, exchange};
  fails_part_on_throw([&] {
    expose(&exchange);
    channel_.attach(job_id_, &mesh);
    if (!start_.rejoin) load_inputs(in, exchange, lists.members);
    train(in, exchange, lists.members);
  });
}

// Runs one phase of the part; whatever it throws fails this part (and only it), by name.
bool JobRunner::fails_part_on_throw(const std::function<void()>& phase) {
  try {
    phase();
    return true;
  } catch (const core::UserError& e) {
    fail(e.what_happened(), e.fix());
  } catch (const std::exception& e) {
    fail(e.what(), "see the node's log (journalctl -u dtraind)");
  }
  return false;
}

void JobRunner::fail(const std::string& error, const std::string& fix) {
  spdlog::error("job {}: {}", job_id_text(job_id_), error);
  progress_->stats().flush();  // what it recorded before it failed
  report_(FailedReport{int(start_.rank), error, fix, bool(cancel_)});
}

// A wait at a barrier is reported well before a silent node is declared lost (at the peer
// timeout), so the log says whom the job waits for while it still waits; the watchdog names
// the peers holding this node's bytes (what a blocked publish waits for).
void JobRunner::watch(MeshExchange& exchange, const std::vector<JobMember>& members) {
  exchange.set_stall_threshold(
      std::chrono::milliseconds(std::max<int64_t>(1000, config_.peer_timeout_ms / 5)));
  exchange.on_stall = [this](const std::string& line) {
    spdlog::warn("job {}: {}", job_id_text(job_id_), line);
    report_(LogReport{line});
  };
  exchange.start_watchdog([this, members] {
    std::vector<std::string> out;
    const auto counters = channel_.endpoint().counters();
    for (const JobMember& m : members) {
      auto it = counters.find(m.id);
      if (m.id == self_ || it == counters.end()) continue;
      const uint64_t held = it->second.queued_bytes + it->second.in_flight_bytes;
      if (held == 0) continue;
      char mb[32];
      std::snprintf(mb, sizeof mb, "%.1f", double(held) / 1e6);
      out.push_back(m.name + " (" + mb + " MB queued or unacknowledged)");
    }
    // A path that drops jumbo frames passes heartbeats and acks but no full datagram.
    if (!out.empty() && config_.data_mtu > 1500)
      out.push_back("with data.mtu " + std::to_string(config_.data_mtu) +
                    ", a switch that drops jumbo frames holds back every full datagram "
                    "(docs/operations.md, \"Jumbo frames\")");
    return out;
  });
}

transport::MeshNode::Handlers JobRunner::mesh_handlers(MeshExchange& exchange) {
  transport::MeshNode::Handlers handlers;
  handlers.on_message = [&exchange](transport::Delivery& d) { exchange.on_message(std::move(d)); };
  handlers.on_loss = [&exchange](uint32_t lost, const std::vector<uint32_t>&, uint64_t) {
    exchange.on_loss(lost);
  };
  return handlers;
}

// The job's mesh. Restarted mid-job, or new to it (joining): the map as the live nodes have it
// (the lost ones out, this node back as a leaf; a newcomer under the root, as
// MeshNode::add_member puts it), and their parameters before training (MeshExchange::resume).
transport::MeshMap JobRunner::mesh_map(MeshExchange& exchange,
                                       const std::vector<transport::MeshMember>& members) {
  transport::MeshMap map = transport::MeshMap::build(start_.mesh, members);
  if (!start_.rejoin) return map;
  transport::MeshMember me = *map.find(self_);
  if (start_.joining) me.parent = me.id;
  for (uint32_t id : start_.lost)
    if (map.contains(id)) map = map.without(id);
  map = map.with(me);
  exchange.set_rejoining(start_.lost);
  exchange.on_resumed = [this](int64_t epoch, const std::string& from) {
    report_(RejoinedReport{epoch + 1, from});
  };
  return map;
}

// cancel() and rejoin() reach the exchange while run() has it; rejoins that came before it
// existed are applied now.
void JobRunner::expose(MeshExchange* exchange) {
  std::lock_guard<std::mutex> lock(exchange_mutex_);
  exchange_ = exchange;
  if (!exchange) return;
  for (const RejoinMessage& r : early_rejoins_) apply(*exchange, r);
  early_rejoins_.clear();
  if (cancel_) exchange->cancel();  // cancelled before the exchange existed
}

// ---- train(): the spec, the options, the training, the result ----


// Where this part may read inputs: the node's data_roots, and the folders of the jobs whose
// models the controller checked its owner may start from.
core::DataRoots JobRunner::input_roots() const {
  core::DataRoots roots = config_.input_roots();
  for (uint64_t readable : start_.readable_jobs)
    roots.granted.push_back(job_folder(config_.data_dir, readable));
  return roots;
}

// The spec as this node reads it (its data_roots), the sync choice (a fresh start's: the
// election needs the mesh), and the node's data and options.
void JobRunner::load_inputs(TrainingInputs& in, MeshExchange& exchange,
                            const std::vector<JobMember>& members) {
  core::SpecParseOptions parse = core::stored_spec_options(start_.base_dir);
  parse.check_files = true;  // this node trains on them, from its data_roots only
  parse.data_roots = input_roots();
  in.job = core::parse_job_spec_text(start_.spec, start_.name, parse);
  core::check_data_memory(in.job, config_.job_memory_bytes());  // from headers, before loading
  if (!start_.rejoin) resolve_auto_sync(in, exchange, members);
  describe_part(in.job, exchange, members);
  prepare(in, exchange, members);
}

void JobRunner::train(TrainingInputs& in, MeshExchange& exchange,
                      const std::vector<JobMember>& members) {
  // Only now may the others be told to admit this node: it takes the job's datagrams (the
  // parameters they send it would be dropped before), and it has its data.
  if (start_.rejoin) {
    report_(AttachedReport{start_.rank});
    resolve_auto_sync(in, exchange, members);  // told by the live nodes once they admit it
  }
  sample_links(members);
  if (core::reduces_every_step(in.job.training)) use_nccl_between_nodes(exchange);
  const core::TrainingResult r = core::train_local(in.local, *progress_, in.options);
  progress_->stats().flush();  // before the result: the controller has every row then
  if (cancel_) throw core::UserError("the job was cancelled", "");
  leave_mesh_when_all_done(exchange);
  report_(result_report(in, r, exchange));
}

// Every node sent an id takes part, GPUs or not (one that cannot form it still votes, so that
// all leave NCCL alike); a rejoining node was never in the communicator the others formed, and
// they leave it when they admit it.
void JobRunner::use_nccl_between_nodes(MeshExchange& exchange) {
  if (start_.nccl_id.empty()) {
    if (!start_.nccl_why.empty())
      spdlog::info("job {}: the sums between nodes go over the mesh: {}", job_id_text(job_id_),
                   start_.nccl_why);
    return;
  }
  if (start_.rejoin) return;
  std::vector<uint32_t> ranks;
  int index = -1;
  for (const JobMemberInfo& m : start_.members) {
    if (m.address.empty()) continue;  // a vacant slot
    if (m.id == self_) index = int(ranks.size());
    ranks.push_back(m.id);
  }
  const JobMemberInfo& me = start_.members[start_.rank];
  const int device = me.gpu && !me.gpus.empty() ? me.gpus.front() : -1;
  const int count = int(ranks.size());
  exchange.use_node_collective(
      [id = start_.nccl_id, count, index, device](const kernels::GiveUp& give_up,
                                                  std::string* why)
          -> std::unique_ptr<kernels::NodeCollective> {
        if (device < 0) {
          *why = "this node's workers are not on GPUs";
          return nullptr;
        }
        return kernels::open_node_collective(id, count, index, device, give_up, why);
      },
      std::move(ranks));
}

void JobRunner::resolve_auto_sync(TrainingInputs& in, MeshExchange& exchange,
                                  const std::vector<JobMember>& members) {
  if (!core::sync_is_auto(in.job.training)) return;
  // Steps are timed and rehearsed with the kernel threads a worker will train with (the
  // backend's default is every core: a step timed so runs faster than training's, and three
  // nodes rehearsing on shared cores each with every core run slower).
  kernels::backend().set_num_threads(core::threads_per_worker(
      job_threads(config_.threads, start_.members[start_.rank].cores),
      members[start_.rank].workers));
  // `mode: auto`'s ring steps sum a step's values, as allreduce's steps do.
  const bool mode_auto = core::mode_is_auto(in.job.training);
  const int64_t step_values = mode_auto ? set_up_ring(in.job, exchange) : 0;
  std::vector<float> ring_values;
  // What this node computes if the chooser has the nodes rehearse (sync_rehearsal.h), made
  // only when a plan comes (a model too slow to rehearse never pays for it); a rejoining node
  // is told the choice, made before it came back.
  std::optional<core::RehearsalWork> work;
  struct WorkLent {  // the election never keeps work that is gone
    SyncElection& election;
    ~WorkLent() { election.set_rehearsal_work({}); }
  } lent{exchange.sync_election()};
  if (!start_.rejoin)
    lent.election.set_rehearsal_work(
        {[&] { work.emplace(in.job, exchange.total_workers(), int(members.size())); },
         [&work] { work->step(); }, [&work] { work->share_step(); },
         [&work] { work->round(); },
         mode_auto ? SyncRehearsal::RingStep([&](int32_t index, std::chrono::milliseconds wait) {
           ring_values.assign(size_t(step_values), 0.f);
           exchange.rehearse_ring(ring_values.data(), step_values, index, wait);
         })
                   : nullptr});
  const core::SyncChoice choice = choose_sync(in.job, exchange, members);
  if (choice.allreduce && !core::may_choose_allreduce(in.job))
    throw core::UserError("the job's first node chose allreduce, which this job cannot take (" +
                              std::string(core::mode_name(in.job.training.mode)) + ")",
                          "run the same dtrain release on every node");
  core::apply_sync_choice(in.job.training, choice);
  // prepare() made in.local before a rejoin, and told the exchange the sums' size for its mode.
  in.local.training.mode = in.job.training.mode;
  in.local.training.sync = in.job.training.sync;
  if (core::reduces_every_step(in.job.training)) set_up_ring(in.job, exchange);
  spdlog::info("job {}: {}: {}", job_id_text(job_id_),
               mode_auto ? "training.mode auto" : "training.sync auto", choice.reason);
}

core::SyncChoice JobRunner::choose_sync(const core::JobSpec& job, MeshExchange& exchange,
                                        const std::vector<JobMember>& members) {
  SyncElection& election = exchange.sync_election();
  if (start_.rejoin) return election.await(std::nullopt, barrier_deadline());
  if (start_.rank != 0) return election.await(members[0].id, barrier_deadline());
  core::SyncChoice choice;
  int nodes = 0, workers = 0;  // the live ones (an elastic job's vacant slots have no address)
  for (const JobMemberInfo& m : start_.members)
    if (!m.address.empty()) ++nodes, workers += m.workers;
  // A resumed `mode: auto` job keeps the mode its checkpoint was trained in (an allreduce step
  // needs every replica's updater state the same bits, which gradient sharing's are not).
  const bool resumed_auto = core::mode_is_auto(job.training) && start_.resume_epoch >= 0;
  core::TrainingSpec weighed = job.training;
  if (!job.data.train.shards.empty()) {
    choice = core::per_step_choice("node-local shards (data.train.shards)");
  } else if (nodes <= 1) {
    choice = core::per_step_choice("one node");
  } else if (resumed_auto && !checkpoint_shares(job)) {
    choice = {0, "resumed from a checkpoint of allreduce: allreduce", true};
  } else {
    if (resumed_auto) weighed.mode = core::TrainingMode::kGradientSharing;
    choice = measured_choice(job, weighed, exchange, nodes, workers);
    if (resumed_auto)
      choice.reason = "resumed from a checkpoint of gradient sharing; " + choice.reason;
  }
  election.announce(choice, std::max(std::chrono::milliseconds(5000), peer_timeout()));
  report_(LogReport{std::string(core::mode_is_auto(job.training) ? "training.mode auto: "
                                                                 : "training.sync auto: ") +
                    choice.reason});
  return choice;
}

// Rank 0 of a job of more than one node: a step timed, the mesh probed, the nodes' rehearsal,
// and the rule's choice for `training` (the job's, or for a resumed `mode: auto` job the
// mode its checkpoint kept).
core::SyncChoice JobRunner::measured_choice(const core::JobSpec& job,
                                            const core::TrainingSpec& training,
                                            MeshExchange& exchange, int nodes, int workers) {
  SyncElection& election = exchange.sync_election();
  core::SyncChoiceInputs in;
  const core::StepTiming step = core::time_training_step(job, exchange.total_workers());
  in.step_s = step.seconds;
  in.num_params = step.num_params;
  in.round_bytes = step.round_bytes;
  in.round_work_s = step.round_work_s;
  in.part_decode_s = step.part_decode_s;
  in.step_work_s = step.step_work_s;
  in.nodes = nodes;
  in.workers = workers;
  in.path_hops =
      int(transport::MeshMap::build(start_.mesh, member_lists(start_).mesh).longest_path());
  const auto deadline = std::max(std::chrono::milliseconds(5000), peer_timeout());
  in.link = election.measure(deadline, size_t(step.round_bytes),
                             size_t(core::step_message_bytes(training, step.num_params)));
  if (core::worth_rehearsing(in))
    in.rehearsal = election.rehearse(rehearsal_plan(training, in), deadline);
  core::SyncChoice choice = core::choose_training(training, in);
  if (core::mode_is_auto(training) && core::may_choose_allreduce(job) &&
      core::TestFault::from_environment().kind == core::TestFault::Kind::kAutoAllreduce)
    choice = {0, choice.reason + "; DTRAIN_TEST_FAULT takes allreduce", true, choice.step_s};
  return choice;
}

// Whether this node's checkpoint to resume from holds gradient sharing's state (its residual:
// per-step sharing and local steps write it, allreduce does not).
bool JobRunner::checkpoint_shares(const core::JobSpec& job) const {
  const std::filesystem::path model =
      std::filesystem::path(job_folder(config_.data_dir, job_id_)) / job.output.model;
  return epoch_checkpoint(model.string(), job.output.model, job.source_text).model.has_sharing;
}

// The log's first lines: where this part sits in the job, how its batch is divided (once, by
// rank 0), and parameter averaging's rhythm.
void JobRunner::describe_part(const core::JobSpec& job, const MeshExchange& exchange,
                              const std::vector<JobMember>& members) {
  const int rank = int(start_.rank);
  spdlog::info("job {} ({}): rank {} of {}, workers {}..{} of {}", job_id_text(job_id_),
               job.name, rank, members.size(), exchange.first_worker(),
               exchange.first_worker() + members[rank].workers - 1, exchange.total_workers());
  if (rank == 0)
    report_(LogReport{core::describe_batch(job.training, exchange.total_workers())});
  if (job.training.mode == core::TrainingMode::kParameterAveraging)
    report_(LogReport{"parameter averaging every " +
                      std::to_string(job.training.averaging_frequency) + " minibatches" +
                      (job.training.average_updater_state ? ", updater state included" : "")});
  if (rank == 0 && core::steps_locally(job.training))
    report_(LogReport{core::describe_local_steps(job.training.sync.local)});
}

void JobRunner::prepare(TrainingInputs& in, MeshExchange& exchange,
                        const std::vector<JobMember>& members) {
  const int rank = int(start_.rank);
  exchange.set_epochs(in.job.training.epochs);
  if (core::reduces_every_step(in.job.training)) set_up_ring(in.job, exchange);
  in.local = in.job;
  in.local.training.workers_per_node = members[rank].workers;
  core::LocalTrainingOptions& o = in.options;
  // The controller placed this node's workers (daemon/controller/placement): on its GPUs or
  // its CPU.
  const JobMemberInfo& me = start_.members[size_t(rank)];
  if (me.gpu) o.gpus = me.gpus;
  o.exchange = &exchange;
  o.cancel = &cancel_;
  // Every node writes the final model into its own data directory: whichever node speaks for
  // the job at the end (the lowest rank that finished) has it, even if rank 0 was lost.
  o.write_model = true;
  o.threads = job_threads(config_.threads, me.cores);
  o.evaluate_each_epoch = rank == 0;
  o.test_fault = core::TestFault::from_environment();  // a test's, warned about at start
  const std::filesystem::path model =
      std::filesystem::path(job_folder(config_.data_dir, job_id_)) / in.job.output.model;
  std::filesystem::create_directories(model.parent_path());
  o.output_path = model.string();
  if (start_.resume_epoch >= 0) resume_from_checkpoint(in, exchange);
  if (!in.job.data.train.shards.empty()) {
    in.local_data = await_data_plan(in.job, barrier_deadline());
    o.local_data = &in.local_data;
  }
  o.final_params = &in.final_params;
  progress_->plan_stats(
      in.job.training.epochs,
      core::worker_batch(in.job.training, int(exchange.total_workers())).per_worker);
}

// Every member restarted: the job goes on from its consistent checkpoint, this node's copy.
void JobRunner::resume_from_checkpoint(TrainingInputs& in, MeshExchange& exchange) {
  in.checkpoint =
      epoch_checkpoint(in.options.output_path, in.job.output.model, in.job.source_text);
  in.local.model.init_from = in.checkpoint.path;
  in.local.model.init_from_roots = nullptr;  // this node's own checkpoint, in the job's folder
  in.local.model.init_from_updater = in.checkpoint.model.has_updater;
  in.options.resume = &in.checkpoint.model;
  exchange.start_at(start_.resume_epoch);
  const std::vector<float>& params = in.checkpoint.model.params;
  report_(LogReport{"resuming from " + in.checkpoint.path + " (" +
                    std::to_string(start_.resume_epoch) + " epochs done, parameters sha256 " +
                    floats_sha256(params.data(), params.size()) + ")"});
}

// This node's checkpoint of the job with resume_epoch epochs done: in the job's folder, or for a
// job a release before job folders started, in data_dir/models/ where that release wrote it (new
// checkpoints go to the job's folder). That folder was shared by every job: a checkpoint there
// counts only when it holds this job's own spec, word for word (`spec_text`), so another job's
// files of the same name are never taken for this job's.
core::ResumePoint JobRunner::epoch_checkpoint(const std::string& model_path,
                                              const std::string& model_name,
                                              const std::string& spec_text) const {
  const std::string earlier = config_.data_dir + "/models/" + model_name;
  if (core::list_checkpoints(model_path).empty() && !core::list_checkpoints(earlier).empty()) {
    core::ResumePoint point = core::find_epoch_checkpoint(earlier, start_.resume_epoch);
    if (point.model.spec_yaml == spec_text) return point;
  }
  return core::find_epoch_checkpoint(model_path, start_.resume_epoch);
}

// The stats history's link rows: this job's peers' counters.
void JobRunner::sample_links(const std::vector<JobMember>& members) {
  std::set<uint32_t> peers;
  for (const JobMember& m : members)
    if (m.id != self_) peers.insert(m.id);
  progress_->stats().sample_links_with([this, peers] {
    std::vector<StatsRecorder::LinkSample> out;
    for (const auto& [peer, c] : channel_.endpoint().counters())
      if (peers.count(peer))
        out.push_back({peer, c.bytes_out, c.bytes_in, c.datagrams_out, c.retransmits, c.rtt_us});
    return out;
  });
}

// Stay on the mesh until every node has finished: others may still need what this node relays
// (the root relays everything in plain mode).
void JobRunner::leave_mesh_when_all_done(MeshExchange& exchange) {
  exchange.end_epoch(-1, 0.0, 0);
  for (auto end = Clock::now() + std::chrono::seconds(30);
       !channel_.endpoint().idle() && Clock::now() < end;)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

ResultReport JobRunner::result_report(const TrainingInputs& in, const core::TrainingResult& r,
                                      MeshExchange& exchange) {
  const core::JobSpec& job = in.job;
  ResultReport result;
  result.rank = start_.rank;
  result.iterations = r.iterations;
  result.samples = r.samples;
  result.train_seconds = r.train_seconds;
  result.messages = r.messages;
  result.message_bytes = r.message_bytes;
  result.params = r.params;
  result.workers = int32_t(r.workers);
  result.codec_kernel = r.codec_kernel;
  result.device = r.device;
  result.mesh_messages_sent = exchange.messages_sent();
  result.mesh_bytes_sent = exchange.bytes_sent();
  result.lost_nodes = exchange.lost_names();
  result.mode = core::mode_name(job.training.mode);
  result.sync = job.training.sync.mode;
  result.sync_bound = job.training.sync.bound;
  result.max_steps_ahead = r.max_ahead;
  result.stop_on_divergence = job.training.stop_on_divergence;
  result.fp16 = job.training.precision == kernels::Precision::kFp16;
  result.overflow_skipped_steps = r.overflow_skipped_steps;
  result.gpu_sharing = r.gpu_sharing;
  result.messages_from_gpus = r.messages_from_gpus;
  const core::LayerSpec& out = job.model.layers.back();
  if (out.loss != core::Loss::kMse) result.classes = out.units;
  add_checks(result, in, r);
  return result;
}

// What the controller checks across nodes: the updates applied, the evaluation part, the
// model file's digest and a sample of the final parameters.
void JobRunner::add_checks(ResultReport& result, const TrainingInputs& in,
                           const core::TrainingResult& r) {
  if (r.audited && core::shares_every_step(in.job.training))
    // The updates worker 0 applied: the controller checks every node applied the same set.
    result.applied =
        ResultReport::Applied{r.applied_messages, r.applied_digest, r.audit_deviation};
  if (r.evaluated)
    // This node's part of the test set; the controller merges every node's counts.
    result.evaluation = ResultReport::Evaluation{r.eval_part, r.eval_parts, r.final_eval.count(),
                                                 r.test_examples,
                                                 evaluation_counts(r.final_eval)};
  if (!r.model_path.empty()) {
    result.model_path = r.model_path;
    // dtrain-submit fetch checks the file it copies against this (daemon/protocol/model_fetch).
    result.model_sha256 = file_sha256(r.model_path);
  }
  if (!r.stopped_early.empty()) {
    result.stopped_early = r.stopped_early;
    if (start_.rank == 0) report_(LogReport{r.stopped_early});
  }
  const std::vector<float>& params = in.final_params;
  const int64_t stride = std::max<int64_t>(1, int64_t(params.size()) / kParamSample);
  for (size_t i = 0; i < params.size(); i += stride) result.params_sample.push_back(params[i]);
}

}  // namespace dtrain::daemon
