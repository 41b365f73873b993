#include "core/train/training_run.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <numeric>
#include <thread>

#include "core/eval/evaluate.h"
#include "core/io/model_file.h"
#include "core/model/model_builder.h"
#include "core/spec/workers_per_node.h"
#include "core/train/averaging_rounds.h"
#include "core/train/checkpoints.h"
#include "core/train/corrections.h"
#include "core/train/device_placement.h"
#include "core/train/init_from.h"
#include "core/train/sync_choice.h"
#include "core/train/takeover.h"
#include "core/train/training_setup.h"
#include "core/train/worker_threads.h"
#include "core/util/error.h"

namespace dtrain::core {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double milliseconds(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

double unix_ms_now() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int threads_per_worker(int threads, int workers) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, (threads > 0 ? threads : cores) / workers);
}

int resolve_workers_per_node(const JobSpec& job) {
  return workers_per_node(job.training, std::thread::hardware_concurrency(), /*gpus=*/0);
}

TrainingResult train_local(const JobSpec& job, TrainingListener& listener,
                           const LocalTrainingOptions& options) {
  if (!sync_is_auto(job.training)) return TrainingRun(job, listener, options).run();
  // In one process the workers share through memory: no link to wait for (a cluster's node
  // has resolved `auto` before, daemon/node/sync_election.h).
  JobSpec resolved = job;
  apply_sync_choice(resolved.training, per_step_choice("one process"));
  return TrainingRun(resolved, listener, options).run();
}

// ---- Setup ----

TrainingRun::Initial::Initial(const JobSpec& job) : model(job.model) {
  model.init(job.seed);
  updater_state = init_from_model(job, model);  // fine-tuning
}

TrainingRun::BusRelease::~BusRelease() {
  bus.drop_pending();
  bus.set_gpu_sharing(nullptr);
}

TrainingRun::ExchangeRelease::~ExchangeRelease() {
  if (exchange) exchange->detach();
}

// The parameter cap, from the spec's shapes alone: before the data is read and before anything
// parameter-sized is allocated, so a job that cannot fit is refused at once, by name.
TrainingData TrainingRun::load_data(const JobSpec& job, int workers,
                                    const LocalTrainingOptions& options) {
  kernels::backend().set_num_threads(threads_per_worker(options.threads, workers));
  check_memory(job, count_model(job.model).params, workers, options.gpus);
  return load_training_data(job, options.local_data ? &options.local_data->files : nullptr);
}

TrainingRun::TrainingRun(const JobSpec& job, TrainingListener& listener,
                         const LocalTrainingOptions& options)
    : job_(job),
      listener_(listener),
      options_(options),
      exchange_(options.exchange),
      local_data_(options.local_data),
      sharing_(shares_every_step(job.training)),
      num_workers_(resolve_workers_per_node(job)),
      threads_per_worker_(threads_per_worker(options.threads, num_workers_)),
      data_(load_data(job, num_workers_, options)),
      initial_(job),
      engine_(CodecEngine::get()),
      first_shard_(exchange_ ? exchange_->first_worker() : 0),
      shards_(exchange_ ? exchange_->total_workers() : num_workers_),
      worker_job_(per_worker_spec(job, shards_)),
      batching_(worker_batch(job.training, shards_)),
      batch_(worker_job_.training.batch_size_per_worker),
      gate_(sharing_ ? job.training.sync.bound : 0, shard_batches()),
      bus_(num_workers_, &gate_),
      audit_(initial_.model.num_params(), sharing_ && job.training.audit_updates),
      gpu_backends_(make_gpu_backends(options.gpus, num_workers_, job.training.precision)),
      output_(options.output_path.empty() ? job.output.model : options.output_path),
      divergence_(job) {
  build_gpu_sharing();
  build_workers();
  if (reduces_every_step(job.training)) build_gradient_rounds();
}

TrainingRun::~TrainingRun() = default;

std::vector<int64_t> TrainingRun::shard_batches() const {
  const int64_t examples = data_.train_source().size();
  return local_data_ ? local_shard_batches(*local_data_, examples, batch_, shards_)
                     : even_shard_batches(examples, batch_, shards_);
}

// One GPU worker shares with no other GPU, so it forms no group (NCCL would only add its
// start-up, and a risk, to every single-GPU job).
void TrainingRun::build_gpu_sharing() {
  if (!sharing_ || gpu_backends_.size() <= 1) return;
  std::vector<kernels::Backend*> ranks;
  for (const auto& b : gpu_backends_) ranks.push_back(b.get());
  gpu_sharing_ = make_gpu_sharing(ranks, &gpu_sharing_text_);
  bus_.set_gpu_sharing(gpu_sharing_.get());
}

void TrainingRun::build_workers() {
  for (int w = 0; w < num_workers_; ++w) {
    kernels::Backend* backend = gpu_backends_.empty() ? nullptr : gpu_backends_[w].get();
    // Node-local data: worker w's shard is its part of this node's examples only.
    const DataShard data_shard = local_data_ ? DataShard{w, num_workers_} : DataShard{};
    workers_.push_back(std::make_unique<SharingWorker>(worker_job_, data_.train_source(),
                                                       initial_.model, w, first_shard_ + w,
                                                       shards_, bus_, engine_, backend,
                                                       data_shard));
    SharingWorker& sw = *workers_.back();
    if (options_.message_observer) sw.set_observer(options_.message_observer);
    sw.set_wait(exchange_ ? exchange_->wait_deadline() : std::chrono::minutes(10),
                [this] { return stop_ || cancelled(); },
                /*all_local=*/!exchange_);
    if (exchange_)
      sw.set_stall_report(exchange_->stall_threshold(),
                          [exchange = exchange_](std::chrono::milliseconds waited, int64_t epoch,
                                                 int64_t batch, const std::vector<int>& waiting) {
                            exchange->step_stalled(waited, epoch, batch, waiting);
                          });
  }
  for (auto& w : workers_)
    set_initial_updater_state(job_, initial_.updater_state, w->worker().updater());
  if (sharing_) workers_[0]->set_audit(&audit_);
  workers_[0]->set_test_fault(options_.test_fault);
}

// Mode allreduce: the step's buckets, overlapped with the backward pass when the gradients are
// in host memory (a GPU worker's reach the host only once its pass is done).
void TrainingRun::build_gradient_rounds() {
  const Model& model = initial_.model;
  std::vector<GradientBucket> buckets =
      plan_buckets(model.backward_frontiers(), model.num_params(),
                   bucket_values(job_.training.allreduce.bucket_mb));
  const bool overlap = exchange_ && buckets.size() > 1 && gpu_backends_.empty();
  allreduce_plan_text_ = describe_buckets(buckets, overlap);
  if (exchange_) exchange_->set_step_buckets(int(buckets.size()));
  reduce_ = std::make_unique<GradientRounds>(num_workers_, model.num_params(), std::move(buckets),
                                             worker_corrections(job_.training), exchange_,
                                             overlap);
  if (overlap)
    for (int w = 0; w < num_workers_; ++w)
      workers_[size_t(w)]->worker().set_gradients_ready(
          [this, w](int64_t from) { reduce_->ready(w, from); });
  if (gpu_backends_.size() > 1) sum_on_devices();
  const std::vector<int64_t> batches = shard_batches();
  steps_per_epoch_ = batches.empty() ? 0 : *std::max_element(batches.begin(), batches.end());
}

// GPU workers of mode allreduce sum their gradients over a device group when one forms
// (gpu_sharing_text_ says which, or why not); a group that fails later is given up for host
// memory, and the node says so.
void TrainingRun::sum_on_devices() {
  std::vector<kernels::Backend*> backends;
  for (const auto& b : gpu_backends_) backends.push_back(b.get());
  std::string why;
  std::unique_ptr<kernels::DeviceGroup> group = kernels::make_device_group(backends, &why);
  if (!group) {
    gpu_sharing_text_ = "host memory (" + why + ")";
    return;
  }
  std::string gpus;
  for (kernels::Backend* b : backends) gpus += (gpus.empty() ? "" : ", ") + std::to_string(b->device());
  gpu_sharing_text_ = group->name() + " all-reduce between GPUs " + gpus;
  std::vector<Worker*> ranks;
  for (auto& w : workers_) ranks.push_back(&w->worker());
  try {
    reduce_->sum_on_devices(std::move(group), std::move(ranks), [this](const std::string& failure) {
      // From the step's last worker, the others waiting for it: nothing else reads the result.
      result_.gpu_sharing += "; host memory since a step failed on it (" + failure + ")";
      listener_.on_gpu_sharing("host memory from now on: the all-reduce between the GPUs failed (" +
                               failure + ")");
    });
  } catch (const std::exception& e) {  // no room on a GPU for the group's sum
    gpu_sharing_text_ = std::string("host memory (") + e.what() + ")";
  }
}

// ---- Where the run starts ----

TrainingResult TrainingRun::run() {
  attach_exchange();
  listener_.on_data_loaded(data_.train_source().size(), data_.test.size(),
                           initial_.model.num_params());
  if (!gpu_sharing_text_.empty()) listener_.on_gpu_sharing(gpu_sharing_text_);
  if (reduce_) listener_.on_allreduce_plan(allreduce_plan_text_);
  start_result();
  restore();
  if (steps_locally(job_.training)) start_local_steps();
  announce_start();
  if (job_.training.early_stopping.enabled) early_.emplace(job_.training.early_stopping);
  for (int64_t epoch = first_epoch_; epoch < job_.training.epochs && !stop_; ++epoch)
    run_epoch(epoch);
  return finish();
}

void TrainingRun::attach_exchange() {
  if (!exchange_ || !sharing_) return;
  exchange_release_.exchange = exchange_;
  bus_.set_outbound([exchange = exchange_](const SharedMessage& m) { exchange->publish(m); });
  exchange_->attach(bus_, initial_.model.num_params());
}

void TrainingRun::start_result() {
  result_.mode = job_.training.mode;
  result_.workers = num_workers_;
  result_.params = initial_.model.num_params();
  result_.device = device_label(options_.gpus);
  result_.gpu_sharing = gpu_sharing_text_;
  if (sharing_)
    result_.codec_kernel =
        gpu_backends_.empty() ? engine_.name() : gpu_backends_[0]->codec().name();
  per_epoch_ = lead().batches_per_epoch();
  // The job's examples, not this node's: with node-local data each node holds its own part, and
  // every node must number the epoch end's averaging round alike (mode allreduce).
  const int64_t examples =
      local_data_ ? std::accumulate(local_data_->member_examples.begin(),
                                    local_data_->member_examples.end(), int64_t(0))
                  : data_.train_source().size();
  rounds_per_epoch_ = rounds_per_epoch(
      examples, shards_, batch_,
      steps_locally(job_.training) ? job_.training.sync.local.steps
                                   : job_.training.averaging_frequency);
  total_iterations_ = per_epoch_ * job_.training.epochs;
  iterations_.assign(size_t(num_workers_), 0);
}

void TrainingRun::restore() {
  if (exchange_) rejoin_from_live_node();
  // A fresh run (not a resume, not a rejoin) starts a new series of checkpoints.
  if (options_.write_model && !options_.resume && !result_.resumed) remove_checkpoints(output_);
  if (options_.resume) resume_from_checkpoint(*options_.resume);
}

// Local steps start from the replica's parameters, or go on from a checkpoint's global
// parameters, outer momentum and residual.
void TrainingRun::start_local_steps() {
  local_ = std::make_unique<LocalSteps>(job_.training, engine_, lead().model().host_params(),
                                        lead().model().num_params(),
                                        exchange_ ? uint32_t(exchange_->first_worker()) : 0);
  // Rejoined: the snapshot's parameters are the global ones; its momentum is the job's.
  if (result_.resumed && exchange_) {
    if (rejoin_momentum_.size() != local_->outer().momentum().size())
      throw UserError("the live node sent an outer momentum of " +
                          std::to_string(rejoin_momentum_.size()) + " values; this job's has " +
                          std::to_string(local_->outer().momentum().size()),
                      "run the same dtrain release and job spec on every node");
    local_->rebase(lead().model().host_params(), rejoin_momentum_);
  }
  const ModelFile* from = options_.resume;
  if (from && from->has_local_steps && from->has_sharing &&
      !local_->restore(from->global_params, from->outer_momentum, from->residual, from->tau,
                       from->encoder_steps))
    throw UserError("the checkpoint's local steps state does not fit this model",
                    "resume from a checkpoint of this job");
}

// A checkpoint of local steps holds their state too.
ModelFile TrainingRun::with_local_steps(ModelFile f) {
  if (!local_) return f;
  f.has_local_steps = true;
  f.global_params = local_->global();
  f.outer_momentum = local_->outer().momentum();
  f.has_sharing = true;
  f.tau = local_->encoder().threshold().tau();
  f.residual = local_->encoder().residual();
  f.encoder_steps = local_->encoder().steps();
  return f;
}

void TrainingRun::announce_start() {
  Model& m = lead().model();
  StartPoint start;
  start.epoch = first_epoch_;
  start.iteration = iterations_[0];
  start.restored = result_.resumed || options_.resume != nullptr;
  start.params = m.host_params();
  start.num_params = m.num_params();
  start.state = m.host_state();
  start.num_state = m.num_state();
  if (local_ && start.restored) {  // what a listener compares with the checkpoint's
    start.outer_momentum = local_->outer().momentum();
    start.local_residual = local_->encoder().residual();
  }
  listener_.on_start(start);
}

// Rejoining: every replica starts from a live node's parameters at an epoch end; updater state
// and residuals start empty (they are per worker and died with the old process).
void TrainingRun::rejoin_from_live_node() {
  NodeExchange::Resume resume;
  if (!exchange_->resume(resume)) return;
  for (auto& w : workers_) {
    Model& m = w->worker().model();
    DTRAIN_CHECK(int64_t(resume.params.size()) == m.num_params() &&
                 int64_t(resume.state.size()) == m.num_state())
        << "snapshot of " << resume.params.size() << " parameters";
    m.set_params(resume.params.data());
    m.set_state(resume.state.data());
    if (sharing_) w->encoder().threshold().set_tau(resume.tau);
  }
  first_epoch_ = resume.next_epoch;
  if (reduce_) take_updater_state(resume.outer_momentum);
  rejoin_momentum_ = std::move(resume.outer_momentum);
  result_.resumed = true;
  // The audit goes on from what the live node's audited replica had applied.
  result_.audited = resume.applied.messages > 0;
  audit_.continue_from(resume.applied);
  if (audit_.has_sum()) audit_base_ = resume.params;
  for (auto& it : iterations_) it = first_epoch_ * per_epoch_;
}

// Allreduce, rejoining: every worker goes on with the live node's updater state.
void TrainingRun::take_updater_state(const std::vector<float>& state) {
  for (auto& w : workers_) {
    Updater& u = w->worker().updater();
    if (int64_t(state.size()) != u.state_size())
      throw UserError("the live node sent an updater state of " + std::to_string(state.size()) +
                          " values; this job's has " + std::to_string(u.state_size()),
                      "run the same dtrain release and job spec on every node");
    u.set_state(state);
  }
}

// From a checkpoint: the parameters came with init_from; the position is the next minibatch.
void TrainingRun::resume_from_checkpoint(const ModelFile& from) {
  first_epoch_ = std::max<int64_t>(0, from.epoch);
  // A cluster checkpoint is taken at an epoch end (its iteration counts takeover steps too).
  if (!exchange_)
    skip_ = std::clamp<int64_t>(from.iteration - first_epoch_ * per_epoch_, 0, per_epoch_);
  if (skip_ == per_epoch_) ++first_epoch_, skip_ = 0;  // written at its epoch's last minibatch
  for (auto& it : iterations_) it = first_epoch_ * per_epoch_ + skip_;
  // The skipped minibatches' messages were sent before the checkpoint: under bsp or a bound
  // every worker would otherwise wait for them forever (a 2-worker resume once hung 10 min).
  if (skip_ > 0) gate_.resumed_at(first_epoch_, skip_);
  // The lead worker's sharing state (the others' residuals were not saved: they start empty).
  // A checkpoint of local steps holds a pseudo-gradient's residual, not a step's: a job of
  // `sync: auto` that chose per-step sharing this time starts that residual empty.
  const bool with_sharing = sharing_ && from.has_sharing && !from.has_local_steps;
  if (with_sharing) {
    workers_[0]->encoder().restore(from.residual, from.tau, from.encoder_steps);
    for (auto& w : workers_) w->encoder().threshold().set_tau(from.tau);
  }
  // The other workers' own state, in an epoch-end checkpoint of as many workers (those of a
  // checkpoint with fewer start empty; a residual or state of another size is not taken).
  for (size_t w = 1; w < workers_.size() && w - 1 < from.other_workers.size(); ++w) {
    const ModelFile::WorkerState& s = from.other_workers[w - 1];
    if (with_sharing) workers_[w]->encoder().restore(s.residual, from.tau, s.encoder_steps);
    Updater& u = workers_[w]->worker().updater();
    if (int64_t(s.updater_state.size()) == int64_t(u.host_state().size()) &&
        !s.updater_state.empty())
      u.set_state(s.updater_state);
  }
}

// ---- An epoch ----

void TrainingRun::run_epoch(int64_t epoch) {
  EpochRun e;
  e.epoch = epoch;
  e.skipped = epoch == first_epoch_ ? skip_ : 0;
  for (auto& w : workers_) w->worker().start_epoch(epoch);
  if (e.skipped > 0)
    for (auto& w : workers_) w->worker().skip_batches(e.skipped);
  e.start = Clock::now();
  epoch_samples_ = 0;
  e.workers.resize(size_t(num_workers_));
  if (reduce_) reduce_->start_epoch();
  auto run = [this, &e](int w) { run_worker(w, e); };
  on_every_worker(num_workers_, run);
  for (const WorkerEpoch& s : e.workers)
    if (s.error) std::rethrow_exception(s.error);
  end_epoch(e);
  EpochSummary summary = summarize(e);
  evaluate_epoch(e, summary);
  listener_.on_epoch(summary);
  result_.epochs.push_back(summary);
  check_divergence(summary);
}

// Worker w's steps of its shard until the epoch's end, a stop or a cancel; an error stops
// every worker and is rethrown once they have all returned.
void TrainingRun::run_worker(int w, EpochRun& e) {
  WorkerCursor cursor;
  cursor.in_epoch = cursor.in_epoch_own = e.skipped;
  cursor.batches = workers_[w]->worker().batches_per_epoch();
  // Resumed mid-epoch: the rounds due before the checkpoint are done (allreduce: a round a
  // minibatch).
  if (reduce_) cursor.rounds_done = e.skipped;
  while (!reduce_ && e.skipped > 0 &&
         round_due(cursor.rounds_done, rounds_per_epoch_, e.skipped - 1, cursor.batches))
    ++cursor.rounds_done;
  try {
    kernels::backend().set_num_threads(threads_per_worker_);
    while (!stop_ && !cancelled()) {
      const int64_t it = iterations_[w];
      WorkerStep step;
      if (!take_step(w, e, cursor, step)) break;
      const int64_t samples_now = record_step(w, e, step);
      ++iterations_[w];
      if (w == 0) lead_step(e, cursor, it, samples_now);
    }
  } catch (...) {
    e.workers[w].error = std::current_exception();
    stop_ = true;
  }
}

// One minibatch of worker w's shard; false at the end of the epoch or when a wait was stopped.
bool TrainingRun::take_step(int w, EpochRun& e, WorkerCursor& cursor, WorkerStep& step) {
  const int64_t it = iterations_[w];
  const int64_t schedule_it = schedule_iteration(batching_, it, shards_, first_shard_ + w);
  step.start_unix_ms = unix_ms_now();
  if (reduce_) return allreduce_step(w, e, cursor, step);
  if (!sharing_) return averaging_step(w, e, cursor, it, schedule_it, step);
  SharingWorker& sw = *workers_[w];
  if (!sw.step(it, schedule_it, e.epoch, cursor.in_epoch_own)) return false;
  ++cursor.in_epoch_own;
  step.times = sw.last_times();
  return true;
}

// Parameter averaging: the step on the worker's own replica, then the rounds now due.
bool TrainingRun::averaging_step(int w, EpochRun& e, WorkerCursor& cursor, int64_t iteration,
                                 int64_t schedule_iteration, WorkerStep& step) {
  Worker& worker = workers_[w]->worker();
  const auto t0 = Clock::now();
  if (!worker.compute_step(iteration, schedule_iteration)) return false;
  worker.apply_own_step();
  const auto t1 = Clock::now();
  step.times.compute_ms = milliseconds(t1 - t0);
  step.times.split_data(worker.last_data_ms());
  // Each worker counts its own minibatches (in_epoch is the lead's count for the whole node).
  while ((exchange_ || local_) &&
         round_due(cursor.rounds_done, rounds_per_epoch_, cursor.in_epoch_own, cursor.batches)) {
    const int64_t round = regular_round(e.epoch, rounds_per_epoch_, cursor.rounds_done);
    if (local_)
      local_round(round, cursor.rounds_done + 1 == rounds_per_epoch_);
    else
      average_round(*exchange_, worker, job_.training.average_updater_state, round);
    ++cursor.rounds_done;
  }
  ++cursor.in_epoch_own;
  step.times.wait_ms = milliseconds(Clock::now() - t1);
  return true;
}

// Allreduce: the steps of the job until this worker has done a minibatch of its own (a worker
// whose shard has none left still takes part in the job's steps and applies them), or until the
// job's epoch ends. Every replica applies every step's mean gradient alike; the updater's step
// and the schedule count the job's steps, so they agree on every node.
bool TrainingRun::allreduce_step(int w, EpochRun& e, WorkerCursor& cursor, WorkerStep& step) {
  Worker& worker = workers_[w]->worker();
  auto stopped = [this] { return stop_.load() || cancelled(); };
  while (reduce_->more() && !stopped()) {
    const auto t0 = Clock::now();
    const bool mine = cursor.in_epoch_own < cursor.batches;
    reduce_->begin(w, mine ? &worker : nullptr, cursor.in_epoch_own + 1 < cursor.batches,
                   step_round_id(e.epoch, cursor.rounds_done));
    const bool has = mine && worker.compute_gradient(iterations_[w]);
    const auto t1 = Clock::now();
    const int64_t job_step = e.epoch * steps_per_epoch_ + cursor.rounds_done;
    if (!reduce_->arrive(w, has ? &worker : nullptr, stopped)) return false;
    ++cursor.rounds_done;
    if (reduce_->examples() > 0) worker.apply_gradient(reduce_->mean(), job_step, job_step + 1);
    if (!has) continue;
    ++cursor.in_epoch_own;
    step.times.compute_ms = milliseconds(t1 - t0);
    step.times.split_data(worker.last_data_ms());
    step.times.wait_ms = milliseconds(Clock::now() - t1);
    return true;
  }
  return false;
}

// Local steps: the node's workers meet at the round (NodeRound; alone, one goes at once): their
// mean replica is the node's pseudo-gradient's, and every replica goes on from the result.
// Overlapped, every round but the epoch's last goes out while the next one's steps run.
void TrainingRun::local_round(int64_t round, bool last_of_epoch) {
  auto run = [&] {
    // In one process there is no exchange to hide (and a mid-epoch checkpoint must not fall
    // between a round and its late outer step).
    const bool overlap = job_.training.sync.local.overlap && exchange_ && !last_of_epoch;
    std::vector<float> params = mean_replica();
    const LocalSteps::Round r =
        overlap ? local_->send_round(params.data(), num_workers_, exchange_, round)
                : local_->round(params.data(), num_workers_, exchange_, round);
    for (auto& w : workers_) w->worker().model().set_params(params.data());
    result_.messages += 1;
    result_.message_bytes += r.bytes;
  };
  if (num_workers_ == 1)
    run();
  else
    node_round_.arrive(run, [this] { return stop_.load() || cancelled(); });
}

// The mean of this node's replicas, summed in worker order (the same bits every time).
std::vector<float> TrainingRun::mean_replica() {
  const int64_t n = lead().model().num_params();
  const float* first = lead().model().host_params();
  if (num_workers_ == 1) return std::vector<float>(first, first + n);
  std::vector<double> sum(static_cast<size_t>(n), 0.0);
  for (auto& w : workers_) {
    const float* p = w->worker().model().host_params();
    for (int64_t i = 0; i < n; ++i) sum[size_t(i)] += p[i];
  }
  std::vector<float> mean(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) mean[size_t(i)] = static_cast<float>(sum[size_t(i)] / num_workers_);
  return mean;
}

// The step's figures into the worker's epoch and to the listener; the epoch's samples so far.
int64_t TrainingRun::record_step(int w, EpochRun& e, WorkerStep& step) {
  WorkerEpoch& mine = e.workers[w];
  Worker& worker = workers_[w]->worker();
  // An fp16 step skipped because its loss overflowed has no loss to average.
  if (std::isfinite(worker.last_loss())) {
    mine.loss_sum += worker.last_loss() * worker.last_batch_size();
    mine.loss_samples += worker.last_batch_size();
  }
  mine.samples += worker.last_batch_size();
  const int64_t samples_now = epoch_samples_ += worker.last_batch_size();
  step.iteration = iterations_[w];
  step.epoch = e.epoch;
  step.loss = worker.last_loss();
  step.samples = worker.last_batch_size();
  step.sharing = sharing_;
  if (sharing_) {
    step.codec = workers_[w]->encoder().last_stats();
    mine.messages += step.codec.messages;
    mine.message_bytes += step.codec.message_bytes;
  }
  mine.compute_ms += step.times.compute_ms;
  listener_.on_worker_step(w, step);
  return samples_now;
}

// Worker 0 reports progress, checkpoints and enforces max_iterations.
void TrainingRun::lead_step(EpochRun& e, WorkerCursor& cursor, int64_t iteration,
                            int64_t samples_now) {
  Worker& worker = lead();
  StepProgress p;
  p.epoch = e.epoch;
  p.epochs = job_.training.epochs;
  p.iteration = iteration;
  p.iteration_in_epoch = cursor.in_epoch++;
  p.iterations_per_epoch = per_epoch_;
  p.loss = worker.last_loss();
  if (std::isfinite(p.loss)) divergence_.on_step(p.loss);
  p.diverging = divergence_.diverging();
  const double elapsed = seconds_since(e.start);
  p.samples_per_sec = elapsed > 0 ? samples_now / elapsed : 0.0;
  const double per_iteration = (elapsed_total_ + elapsed) / double(iteration + 1);
  p.eta_seconds =
      per_iteration * double(std::max<int64_t>(0, total_iterations_ - iteration - 1));
  p.workers = num_workers_;
  p.sharing = sharing_;
  if (sharing_) p.codec = workers_[0]->encoder().last_stats();
  listener_.on_step(p);
  checkpoint_mid_epoch(e.epoch);
  if (options_.max_iterations >= 0 && iterations_[0] >= options_.max_iterations) stop_ = true;
}

// A cluster job checkpoints at epoch ends instead (write_epoch_checkpoint): mid-epoch, the
// nodes' replicas are not at one point of the job.
void TrainingRun::checkpoint_mid_epoch(int64_t epoch) {
  if (job_.output.checkpoint_every <= 0 || !options_.write_model || exchange_ ||
      iterations_[0] % job_.output.checkpoint_every != 0)
    return;
  write_checkpoint(output_,
                   with_local_steps(snapshot(job_, lead(), data_, iterations_[0], epoch,
                                             sharing_ ? &workers_[0]->encoder() : nullptr)),
                   job_.output.keep_checkpoints);
  listener_.on_checkpoint(checkpoint_path(output_, iterations_[0]), iterations_[0]);
}

// ---- The epoch's end ----

// Everyone has published everything for this epoch: apply what is still queued, so the
// replicas agree before evaluation and before the next epoch.
void TrainingRun::end_epoch(EpochRun& e) {
  e.cancelled = cancelled();
  if (exchange_ && sharing_ && !e.cancelled) end_sharing_epoch_on_cluster(e);
  for (auto& w : workers_) w->apply_received();
  if (sharing_ && !exchange_) average_tau(workers_);
  average_state(workers_);
  if (exchange_ && !sharing_ && !e.cancelled) end_averaging_epoch_on_cluster(e);
  if (exchange_ && local_ && !e.cancelled) exchange_->set_outer_momentum(local_->outer().momentum());
  // Allreduce: a restarted node needs the updater's state too, or its replica would step
  // differently from the others' (it travels where local steps' outer momentum does).
  if (exchange_ && reduce_ && !e.cancelled) exchange_->set_outer_momentum(lead().updater().host_state());
  if (exchange_ && !e.cancelled)
    exchange_->epoch_applied(e.epoch, lead().model().host_params(), lead().model().num_params(),
                             lead().model().host_state(), lead().model().num_state(),
                             workers_[0]->encoder().threshold().tau(), audit_.totals());
  if (e.cancelled) stop_ = true;
  if (exchange_ && job_.output.checkpoint_every > 0 && options_.write_model && !e.cancelled)
    write_epoch_checkpoint(e.epoch);
}

// Gradient sharing: every live node's messages of the epoch are in; thresholds are averaged
// over the job; a lost node's minibatches left are done by the survivors (or, with node-local
// data, counted as undone); batch-norm statistics are averaged over the job.
void TrainingRun::end_sharing_epoch_on_cluster(EpochRun& e) {
  double tau_sum = 0.0;
  for (auto& w : workers_) tau_sum += w->encoder().threshold().tau();
  const NodeExchange::EpochEnd end = exchange_->end_epoch(e.epoch, tau_sum, num_workers_);
  for (auto& w : workers_)
    w->encoder().threshold().set_tau(static_cast<float>(end.tau_sum / std::max(1, end.workers)));
  result_.lost_nodes = end.lost;
  e.missed_batches = end.missed_batches;
  if (local_data_)
    e.skipped_batches = undone_batches(end, gate_);  // its files are on no other node
  else
    e.takeover_batches = take_over(end, e.epoch, shards_, batching_, gate_, workers_,
                                   iterations_, options_.cancel);
  set_state(workers_, exchange_->end_takeover(e.epoch, state_sum(workers_)));
}

// Averaging: the last round of the epoch is done (the replicas agree). The live nodes meet, do
// the minibatches of lost members and vacant slots between them (allreduce with node-local data:
// skip them) and average once more (every epoch, so that every node takes part in the round
// whatever it saw lost; allreduce and local steps only where a digest shows the replicas
// differ), then admit restarted and joining nodes.
void TrainingRun::end_averaging_epoch_on_cluster(EpochRun& e) {
  const NodeExchange::EpochEnd end = exchange_->end_epoch(e.epoch, 0.0, num_workers_);
  result_.lost_nodes = end.lost;
  if (local_data_)
    e.skipped_batches = undone_batches(end, gate_);  // allreduce: its files are on no other node
  else
    e.takeover_batches = average_take_over(end, shards_, batching_, lead(), num_workers_,
                                           iterations_[0], options_.cancel);
  const int64_t round = takeover_round(e.epoch, rounds_per_epoch_);
  if (local_)
    e.averaged_densely = agree_on_global_state(e.epoch, round);
  else if (reduce_)
    e.averaged_densely = agree_or_average(*exchange_, lead(), e.epoch, round);
  else
    average_round(*exchange_, lead(), job_.training.average_updater_state, round);
  if (reduce_) copy_lead_to_other_workers();
  set_state(workers_, exchange_->end_averaging_epoch(e.epoch, state_sum(workers_)));
}

// Allreduce: the replicas of a node are the same bits after every step; at an epoch's end the
// lead alone did the lost nodes' minibatches and took the average, and the others take its
// parameters and updater state.
void TrainingRun::copy_lead_to_other_workers() {
  const std::vector<float> state = lead().updater().host_state();
  const float* params = lead().model().host_params();
  for (size_t w = 1; w < workers_.size(); ++w) {
    workers_[w]->worker().model().set_params(params);
    workers_[w]->worker().updater().set_state(state);
  }
}

// Local steps at an epoch's end: the replicas should be the same bits already (the epoch's
// last round is after its last minibatch and is not overlapped), and a digest of each node's
// parameters and outer momentum shows whether they are. Where they are not, because a round one
// node saw differently (a node lost while its message was on the way) or the lost nodes'
// minibatches done since the last round, the live nodes average them densely. Either way the
// result is the global state from here on. The check is a ring round of a digest's bits, as
// allreduce's (NodeExchange::replicas_agree: every survivor gets the same answer, a node lost
// during it counted by all or none); the dense average sends 8 bytes a parameter from every
// node through the mesh's relays (docs/performance.md, "The epoch end's check").
bool TrainingRun::agree_on_global_state(int64_t epoch, int64_t round) {
  Model& m = lead().model();
  const int64_t n = m.num_params();
  std::vector<float> both(m.host_params(), m.host_params() + n);
  const std::vector<float>& momentum = local_->outer().momentum();
  both.insert(both.end(), momentum.begin(), momentum.end());
  const bool differed = !exchange_->replicas_agree(both.data(), int64_t(both.size()), epoch);
  if (differed) exchange_->average_parameters(both.data(), int64_t(both.size()), round);
  for (auto& w : workers_) w->worker().model().set_params(both.data());
  local_->rebase(both.data(), std::vector<float>(both.begin() + n, both.end()));
  return differed;
}

// Every node's replica is the same here: the job's checkpoint is every node's file. At least two
// are kept: a node a checkpoint ahead of the others must still hold the one every node has (the
// job's consistent checkpoint) when the cluster goes down.
void TrainingRun::write_epoch_checkpoint(int64_t epoch) {
  const ModelFile written =
      with_local_steps(checkpoint(job_, workers_, data_, iterations_[0], epoch + 1, sharing_));
  write_checkpoint(output_, written, std::max<int64_t>(2, job_.output.keep_checkpoints));
  listener_.on_epoch_checkpoint(checkpoint_path(output_, iterations_[0]), epoch + 1, written);
}

EpochSummary TrainingRun::summarize(const EpochRun& e) {
  EpochSummary summary;
  summary.epoch = e.epoch;
  summary.replica = fingerprint(lead().model().host_params(), lead().model().num_params());
  summary.takeover_batches = e.takeover_batches;
  summary.skipped_batches = e.skipped_batches;
  summary.missed_batches = e.missed_batches;
  summary.averaged_densely = e.averaged_densely;
  summary.seconds = seconds_since(e.start);
  double loss_sum = 0.0, compute_ms = 0.0;
  int64_t samples = 0, loss_samples = 0;
  for (const WorkerEpoch& s : e.workers) {
    compute_ms += s.compute_ms;
    loss_sum += s.loss_sum;
    samples += s.samples;
    loss_samples += s.loss_samples;
    result_.messages += s.messages;
    result_.message_bytes += s.message_bytes;
  }
  summary.train_loss = loss_samples ? loss_sum / loss_samples : 0.0;
  summary.samples_per_sec = summary.seconds > 0 ? samples / summary.seconds : 0.0;
  if (summary.seconds > 0)
    summary.compute_share =
        std::min(1.0, compute_ms / 1000.0 / (summary.seconds * double(e.workers.size())));
  elapsed_total_ += summary.seconds;
  result_.samples += samples;
  return summary;
}

// With training.early_stopping: the epoch's evaluation, the best model kept; whether it
// evaluated.
bool TrainingRun::observe_early_stopping(const EpochRun& e, EpochSummary& summary) {
  if (data_.test.size() == 0 || !early_ || e.cancelled) return false;
  summary.evaluated = true;
  summary.eval = evaluate(lead().model(), data_.test, job_.evaluation.top_n);
  if (early_->observe(e.epoch, summary.eval)) best_ = copy_replica(lead().model());
  if (early_->should_stop()) {
    stop_ = true;
    result_.stopped_early = early_->reason();
  }
  return true;
}

void TrainingRun::evaluate_epoch(const EpochRun& e, EpochSummary& summary) {
  const bool early_evaluated = observe_early_stopping(e, summary);
  const bool last = e.epoch + 1 == job_.training.epochs || stop_;
  if (last && early_evaluated && early_->has_best() && early_->best_epoch() != e.epoch)
    for (auto& w : workers_) restore_replica(w->worker().model(), best_);
  const int64_t n = data_.test.size();
  if (n > 0 && last && exchange_) {
    // A cluster job's final evaluation is spread over the live nodes; the controller merges
    // the parts (Evaluation::merge adds counts, so the result is exact).
    const NodeExchange::EvaluationShard part = exchange_->evaluation_shard();
    result_.final_eval = evaluate(lead().model(), data_.test, job_.evaluation.top_n, 256,
                                        n * part.index / part.count,
                                        n * (part.index + 1) / part.count);
    result_.evaluated = true;
    result_.eval_part = part.index;
    result_.eval_parts = part.count;
    result_.test_examples = n;
  } else if (n > 0 && ((options_.evaluate_each_epoch && !early_evaluated) || last)) {
    summary.evaluated = true;
    summary.eval = evaluate(lead().model(), data_.test, job_.evaluation.top_n);
    result_.final_eval = summary.eval;
    result_.evaluated = true;
    result_.test_examples = n;
  }
}

void TrainingRun::check_divergence(const EpochSummary& summary) {
  if (!job_.training.stop_on_divergence) return;
  if (auto diverged = divergence_.check_epoch(summary.epoch, summary.train_loss,
                                              summary.evaluated ? summary.eval.accuracy() : -1.0))
    throw UserError(*diverged, divergence_.fix());
}

// ---- The result ----

TrainingResult TrainingRun::finish() {
  const std::vector<float> lead_params = compare_replicas_into_result();
  for (const auto& w : workers_) result_.messages_from_gpus += w->messages_from_gpus();
  if (gpu_sharing_ && !gpu_sharing_->failure().empty())
    result_.gpu_sharing += "; host memory since a round failed: " + gpu_sharing_->failure();
  if (options_.final_params) *options_.final_params = lead_params;
  for (auto& w : workers_) {
    result_.max_ahead = std::max(result_.max_ahead, w->max_ahead());
    if (const LossScaler* scaler = w->worker().loss_scaler())
      result_.overflow_skipped_steps += scaler->skipped();
  }
  result_.applied_digest = audit_.digest();
  result_.applied_messages = audit_.count();
  if (audit_.has_sum())
    result_.audit_deviation = audit_.relative_deviation(
        audit_base_.empty() ? initial_.model.params() : audit_base_.data(), lead_params.data());
  result_.iterations = iterations_[0];
  result_.train_seconds = elapsed_total_;
  write_final_model();
  return result_;
}

// Host copies of every replica (downloads on GPUs), compared element by element; the lead's.
std::vector<float> TrainingRun::compare_replicas_into_result() {
  std::vector<std::vector<float>> copies;
  std::vector<const float*> replicas;
  for (auto& w : workers_) {
    const Model& m = w->worker().model();
    const float* params = m.host_params();
    copies.emplace_back(params, params + m.num_params());
  }
  for (const auto& c : copies) replicas.push_back(c.data());
  result_.agreement = compare_replicas(replicas, initial_.model.num_params());
  return std::move(copies[0]);
}

void TrainingRun::write_final_model() {
  if (!options_.write_model) return;
  write_model_file(output_, snapshot(job_, lead(), data_, iterations_[0],
                                     first_epoch_ + static_cast<int64_t>(result_.epochs.size())));
  result_.model_path = output_;
}

}  // namespace dtrain::core
