#include "core/train/local_trainer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <optional>
#include <thread>

#include "core/eval/evaluate.h"
#include "core/io/model_file.h"
#include "core/model/model_builder.h"
#include "core/spec/workers_per_node.h"
#include "core/train/batch_split.h"
#include "core/train/device_placement.h"
#include "core/train/divergence_monitor.h"
#include "core/train/checkpoints.h"
#include "core/train/early_stopping.h"
#include "core/train/gpu_sharing.h"
#include "core/train/init_from.h"
#include "core/train/memory_budget.h"
#include "core/train/training_data.h"
#include "core/util/error.h"
#include "kernels/backend.h"
#include "kernels/gpu_devices.h"
#include "kernels/precision.h"

namespace dtrain::core {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// `encoder`: the worker's gradient-sharing state, for checkpoints (null: the model alone).
ModelFile snapshot(const JobSpec& job, Worker& worker, const TrainingData& data,
                   int64_t iteration, int64_t epoch, const UpdateEncoder* encoder = nullptr) {
  ModelFile f;
  Model& m = worker.model();
  f.spec_yaml = job.source_text;
  const float* params = m.host_params();
  f.params.assign(params, params + m.num_params());
  const float* state = m.host_state();
  f.state.assign(state, state + m.num_state());
  f.has_updater = true;
  f.updater_type = worker.updater().type();
  f.updater_state = worker.updater().host_state();
  f.normalizer = data.normalizer;
  f.class_names = data.train_source().class_names();
  f.iteration = iteration;
  f.epoch = epoch;
  if (encoder) {
    f.has_sharing = true;
    f.tau = encoder->threshold().tau();
    f.residual = encoder->residual();
    f.encoder_steps = encoder->steps();
  }
  return f;
}

// A model's parameters and batch-norm statistics on the host (the best one, for early
// stopping).
struct Replica {
  std::vector<float> params, state;
};
Replica copy_replica(Model& m) {
  return {std::vector<float>(m.host_params(), m.host_params() + m.num_params()),
          std::vector<float>(m.host_state(), m.host_state() + m.num_state())};
}
void restore_replica(Model& m, const Replica& r) {
  m.set_params(r.params.data());
  if (!r.state.empty()) m.set_state(r.state.data());
}

using Workers = std::vector<std::unique_ptr<SharingWorker>>;

// A checkpoint: the lead worker's snapshot and every other worker's residual, step count and
// updater state.
ModelFile checkpoint(const JobSpec& job, Workers& workers, const TrainingData& data,
                     int64_t iteration, int64_t epoch, bool sharing) {
  ModelFile f = snapshot(job, workers[0]->worker(), data, iteration, epoch,
                         sharing ? &workers[0]->encoder() : nullptr);
  for (size_t w = 1; w < workers.size(); ++w) {
    ModelFile::WorkerState s;
    if (sharing) {
      s.encoder_steps = workers[w]->encoder().steps();
      s.residual = workers[w]->encoder().residual();
    }
    s.updater_state = workers[w]->worker().updater().host_state();
    f.other_workers.push_back(std::move(s));
  }
  return f;
}

// Batch-norm running statistics are not parameters, so no message carries them: each replica
// keeps its own and they are averaged at epoch ends (the evaluated and saved model use the mean):
// over the process's workers (average_state), and in a cluster over every live node's at the
// exchange's second barrier (this node's state_sum goes out, the mean comes back to set_state).
NodeExchange::StateSum state_sum(Workers& workers) {
  NodeExchange::StateSum s;
  const int64_t n = workers[0]->worker().model().num_state();
  if (n == 0) return s;
  s.sum.assign(static_cast<size_t>(n), 0.0);
  for (auto& w : workers) {
    const float* state = w->worker().model().host_state();
    for (int64_t i = 0; i < n; ++i) s.sum[static_cast<size_t>(i)] += state[i];
  }
  s.workers = static_cast<int>(workers.size());
  return s;
}

void set_state(Workers& workers, const std::vector<float>& mean) {
  if (mean.empty()) return;
  for (auto& w : workers) w->worker().model().set_state(mean.data());
}

void average_state(Workers& workers) {
  if (workers.size() == 1) return;
  const NodeExchange::StateSum s = state_sum(workers);
  std::vector<float> mean(s.sum.size());
  for (size_t i = 0; i < mean.size(); ++i) mean[i] = static_cast<float>(s.sum[i] / s.workers);
  set_state(workers, mean);
}

// core/README.md, "The update": thresholds are per worker and averaged at each epoch end.
void average_tau(Workers& workers) {
  double sum = 0.0;
  for (auto& w : workers) sum += w->encoder().threshold().tau();
  for (auto& w : workers) w->encoder().threshold().set_tau(static_cast<float>(sum / workers.size()));
}

// Per-worker results of one epoch, written only by that worker's thread.
struct WorkerEpoch {
  double loss_sum = 0.0;
  int64_t samples = 0;
  int64_t loss_samples = 0;  // samples whose loss is known (an fp16 step may have none)
  int64_t messages = 0, message_bytes = 0;
  std::exception_ptr error;
};

// run(w) for every worker, each on a thread of its own (one worker: on this thread).
template <class Run>
void on_every_worker(int workers, Run& run) {
  if (workers == 1) {
    run(0);
    return;
  }
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) threads.emplace_back(run, w);
  for (auto& t : threads) t.join();
}

// One parameter-averaging round; with average_updater_state the updater's momentum/moments
// travel with the parameters and are averaged the same way (core/README.md, "Sharing").
void average_round(NodeExchange& exchange, Worker& worker, bool with_updater_state,
                   int64_t round) {
  Model& m = worker.model();
  const bool with_state = with_updater_state && worker.updater().state_size() > 0;
  if (!with_state && m.on_host()) {
    exchange.average_parameters(m.params(), m.num_params(), round);
    return;
  }
  const float* params = m.host_params();
  std::vector<float> both(params, params + m.num_params());
  std::vector<float> state;
  if (with_state) state = worker.updater().host_state();
  both.insert(both.end(), state.begin(), state.end());
  exchange.average_parameters(both.data(), int64_t(both.size()), round);
  m.set_params(both.data());
  if (!with_state) return;
  std::copy(both.begin() + m.num_params(), both.end(), state.begin());
  worker.updater().set_state(state);
}

// Calls visit(shard, batch) for each minibatch of EpochEnd::takeover dealt to live worker `me`:
// the list in order, round-robin over the live workers, the same deal on every node. Stops
// when visit returns false.
template <typename Visit>
void for_each_dealt(const NodeExchange::EpochEnd& end, int shards, const Worker& worker, int me,
                    Visit visit) {
  int64_t index = 0;
  for (const NodeExchange::Takeover& t : end.takeover) {
    const int64_t batches = worker.batches_in_shard(t.shard, shards);
    for (int64_t b = t.from_batch; b < batches; ++b, ++index)
      if (index % std::max(1, end.live_workers) == me && !visit(t.shard, b)) return;
  }
}

// Minibatches per epoch of each of the job's workers, all reading one data set.
std::vector<int64_t> even_shard_batches(int64_t examples, int64_t batch, int shards) {
  std::vector<int64_t> out;
  for (int s = 0; s < shards; ++s)
    out.push_back(MinibatchIterator::shard_batches(examples, batch, s, shards));
  return out;
}

// Node-local data: each worker's minibatches come from its own node's examples (`examples`
// here, which must be what the plan says, or the gate's counts for this node's workers would
// not be what their iterators make).
std::vector<int64_t> local_shard_batches(const NodeLocalData& plan, int64_t examples,
                                         int64_t batch, int shards) {
  if (plan.self < 0 || size_t(plan.self) >= plan.member_examples.size() ||
      plan.member_examples[size_t(plan.self)] != examples)
    throw UserError("this node's data.train.shards files hold " + std::to_string(examples) +
                        " examples, not what they held when it listed them",
                    "leave the files alone while a job reads them, and submit it again");
  std::vector<int64_t> out;
  for (size_t k = 0; k < plan.member_examples.size() && k < plan.member_workers.size(); ++k) {
    const int workers = plan.member_workers[k];
    for (int j = 0; j < workers; ++j)
      out.push_back(MinibatchIterator::shard_batches(plan.member_examples[k], batch, j, workers));
  }
  if (int(out.size()) != shards)
    throw UserError("the data plan names " + std::to_string(out.size()) + " workers, the job has " +
                        std::to_string(shards),
                    "run the same dtrain release on every node");
  return out;
}

// Node-local data: what is left of a lost node's minibatches this epoch, which no survivor can
// do (its files are not on them). The same count on every node.
int64_t undone_batches(const NodeExchange::EpochEnd& end, const StepGate& gate) {
  int64_t undone = 0;
  for (const NodeExchange::Takeover& t : end.takeover)
    undone += std::max<int64_t>(0, gate.batches_of(t.shard) - t.from_batch);
  return undone;
}

// Survivors of a lost node do its minibatches that are left in this epoch (core/README.md,
// "Sharing"): the same list on every node, dealt round-robin over the live workers of the job.
// Returns how many this node did.
int64_t take_over(const NodeExchange::EpochEnd& end, int64_t epoch, int shards,
                  const WorkerBatch& batching, StepGate& gate, Workers& workers,
                  std::vector<int64_t>& iterations,
                  const std::atomic<bool>* cancel) {
  if (end.takeover.empty()) return 0;
  int64_t dealt = 0;
  for (const NodeExchange::Takeover& t : end.takeover)
    dealt += std::max<int64_t>(0, workers[0]->worker().batches_in_shard(t.shard, shards) -
                                      t.from_batch);
  gate.start_takeover(epoch, takeover_counts(gate, dealt, end.live_workers));
  std::atomic<int64_t> done{0};
  std::vector<std::exception_ptr> errors(workers.size());
  auto run = [&](int w) {
    try {
      SharingWorker& sw = *workers[w];
      const int me = end.live_first_worker + w;
      int64_t step = 0;
      for_each_dealt(end, shards, sw.worker(), me, [&](int64_t shard, int64_t b) {
        if (cancel && *cancel) return false;
        const int64_t it = iterations[w];
        if (sw.step_on(shard, shards, b, it, schedule_iteration(batching, it, shards, me), epoch,
                       step++)) {
          ++iterations[w];
          ++done;
        }
        return true;
      });
    } catch (...) {
      errors[w] = std::current_exception();
    }
  };
  on_every_worker(int(workers.size()), run);
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return done;
}

// Parameter averaging: this node's share of the minibatches of lost members and vacant slots
// (from EpochEnd::takeover, dealt round-robin over the live nodes as in gradient sharing),
// applied to its own replica; the takeover round that follows averages them in.
int64_t average_take_over(const NodeExchange::EpochEnd& end, int shards,
                          const WorkerBatch& batching, Worker& worker, int64_t& iteration,
                          const std::atomic<bool>* cancel) {
  const int me = end.live_first_worker;
  int64_t done = 0;
  for_each_dealt(end, shards, worker, me, [&](int64_t shard, int64_t b) {
    if (cancel && *cancel) return false;
    if (worker.compute_step_on(shard, shards, b, iteration,
                               schedule_iteration(batching, iteration, shards, me))) {
      worker.apply_own_step();
      ++iteration;
      ++done;
    }
    return true;
  });
  return done;
}

// Averaging round ids: the epoch's regular rounds are even, its takeover round odd (after the
// last regular one), so the ids only grow (MeshExchange drops rounds it has averaged).
int64_t regular_round(int64_t epoch, int64_t per_epoch, int64_t k) {
  return 2 * (epoch * per_epoch + k);
}
int64_t takeover_round(int64_t epoch, int64_t per_epoch) {
  return regular_round(epoch, per_epoch, per_epoch - 1) + 1;
}

// The job's parameter cap on this node: its workers' parameter-sized buffers must fit the host's
// memory, or each GPU's (core/train/memory_budget).
void check_memory(const JobSpec& job, int64_t params, int workers, const std::vector<int>& gpus) {
  const int vectors = kernels::updater_state_vectors(updater_rule(job.model.updater.type));
  if (gpus.empty()) {
    check_parameter_memory(params, workers, vectors, available_host_memory(),
                           "this node's memory");
    return;
  }
  for (const kernels::GpuInfo& g : kernels::list_gpus()) {
    int on_it = 0;
    for (int w = 0; w < workers; ++w) on_it += gpus[size_t(w) % gpus.size()] == g.index;
    if (on_it > 0)
      check_parameter_memory(params, on_it, vectors, g.memory_bytes - g.memory_used_bytes,
                             "GPU " + std::to_string(g.index));
  }
}

// One backend per GPU worker (each its own stream), or none for CPU workers. Throws UserError
// when a GPU cannot be used, with the driver's reason.
std::vector<std::unique_ptr<kernels::Backend>> make_gpu_backends(const std::vector<int>& gpus,
                                                                 int workers,
                                                                 const std::string& precision) {
  std::vector<std::unique_ptr<kernels::Backend>> out;
  if (gpus.empty()) return out;
  for (int w = 0; w < workers; ++w) {
    const int gpu = gpus[size_t(w) % gpus.size()];
    std::string why;
    out.push_back(kernels::make_gpu_backend(gpu, &why));
    if (!out.back())
      throw UserError("worker " + std::to_string(w) + " cannot use GPU " + std::to_string(gpu) +
                          ": " + why,
                      "check the GPU with nvidia-smi, or run the job with training.device: cpu");
    // Before the worker's model is built: its layers' kernels are made for the precision.
    if (!out.back()->set_precision(kernels::precision_of(precision)))
      throw UserError("GPU " + std::to_string(gpu) + " (" + out.back()->name() +
                          ") cannot compute in training.precision " + precision,
                      "use precision fp32, or bf16/fp16 on a GPU with tensor cores (sm_80 or "
                      "newer for bf16)");
  }
  return out;
}

}  // namespace

int resolve_workers_per_node(const JobSpec& job) {
  return workers_per_node(job.training, std::thread::hardware_concurrency(), /*gpus=*/0);
}

TrainingResult train_local(const JobSpec& job, TrainingListener& listener,
                           const LocalTrainingOptions& options) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = options.threads > 0 ? options.threads : cores;
  const bool sharing = job.training.mode == "gradient_sharing";
  // parameter_averaging resolves to one worker (the parser refuses asking it for more).
  const int num_workers = resolve_workers_per_node(job);
  const int threads_per_worker = std::max(1, threads / num_workers);
  kernels::backend().set_num_threads(threads_per_worker);

  // The parameter cap, from the spec's shapes alone: before the data is read and before anything
  // parameter-sized is allocated, so a job that cannot fit is refused at once, by name.
  check_memory(job, count_model(job.model).params, num_workers, options.gpus);
  const NodeLocalData* local_data = options.local_data;
  TrainingData data = load_training_data(job, local_data ? &local_data->files : nullptr);
  Model initial(job.model);
  initial.init(job.seed);
  const std::vector<float> initial_updater = init_from_model(job, initial);  // fine-tuning
  const CodecEngine& engine = CodecEngine::get();
  NodeExchange* exchange = options.exchange;
  const int first_shard = exchange ? exchange->first_worker() : 0;
  const int shards = exchange ? exchange->total_workers() : num_workers;
  // Every worker runs the per-worker form of the spec: its batch, and for a split batch the
  // learning rate and clipping that make W workers' steps one step of the job's batch.
  const JobSpec worker_job = per_worker_spec(job, shards);
  const WorkerBatch batching = worker_batch(job.training, shards);
  const int64_t batch = worker_job.training.batch_size_per_worker;
  const std::vector<int64_t> shard_batches =
      local_data ? local_shard_batches(*local_data, data.train_source().size(), batch, shards)
                 : even_shard_batches(data.train_source().size(), batch, shards);
  StepGate gate(sharing ? job.training.sync.bound : 0, shard_batches);
  MessageBus bus(num_workers, &gate);
  std::atomic<bool> stop{false};
  UpdateAudit audit(initial.num_params(), sharing && job.training.audit_updates);
  // Declared before the workers, so that their models (in GPU memory) go first.
  const std::vector<std::unique_ptr<kernels::Backend>> gpu_backends =
      make_gpu_backends(options.gpus, num_workers, job.training.precision);
  // GPU to GPU between this node's GPU workers where a device group forms (NCCL), else host
  // memory; the result says which. One GPU worker shares with no other GPU, so it forms no group
  // (NCCL would only add its start-up, and a risk, to every single-GPU job). Undelivered messages
  // (and their device buffers) go before the group and the backends do.
  std::string gpu_sharing_text;
  std::unique_ptr<GpuSharing> gpu_sharing;
  if (sharing && gpu_backends.size() > 1) {
    std::vector<kernels::Backend*> ranks;
    for (const auto& b : gpu_backends) ranks.push_back(b.get());
    gpu_sharing = make_gpu_sharing(ranks, &gpu_sharing_text);
    bus.set_gpu_sharing(gpu_sharing.get());
  }
  struct DropPending {
    MessageBus& bus;
    ~DropPending() {
      bus.drop_pending();
      bus.set_gpu_sharing(nullptr);
    }
  } drop_pending{bus};
  Workers workers;
  for (int w = 0; w < num_workers; ++w) {
    kernels::Backend* backend = gpu_backends.empty() ? nullptr : gpu_backends[w].get();
    // Node-local data: worker w's shard is its part of this node's examples only.
    const DataShard data_shard =
        local_data ? DataShard{w, num_workers} : DataShard{};
    workers.push_back(std::make_unique<SharingWorker>(worker_job, data.train_source(), initial, w,
                                                      first_shard + w, shards, bus, engine,
                                                      backend, data_shard));
    SharingWorker& sw = *workers.back();
    if (options.message_observer) sw.set_observer(options.message_observer);
    sw.set_wait(exchange ? exchange->wait_deadline() : std::chrono::minutes(10),
                [&stop, cancel = options.cancel] { return stop || (cancel && *cancel); },
                /*all_local=*/!exchange);
    if (exchange)
      sw.set_stall_report(exchange->stall_threshold(),
                          [exchange](std::chrono::milliseconds waited, int64_t epoch,
                                     int64_t batch, const std::vector<int>& waiting) {
                            exchange->step_stalled(waited, epoch, batch, waiting);
                          });
  }
  for (auto& w : workers) set_initial_updater_state(job, initial_updater, w->worker().updater());
  if (sharing) workers[0]->set_audit(&audit);
  // The exchange delivers from the network's thread into `bus`, which dies with this frame,
  // also when training throws: it must let go of it first.
  struct Detach {
    NodeExchange* exchange;
    ~Detach() {
      if (exchange) exchange->detach();
    }
  } detach{exchange && sharing ? exchange : nullptr};
  if (exchange && sharing) {
    bus.set_outbound([exchange](const SharedMessage& m) { exchange->publish(m); });
    exchange->attach(bus, initial.num_params());
  }
  listener.on_data_loaded(data.train_source().size(), data.test.size(), initial.num_params());
  if (!gpu_sharing_text.empty()) listener.on_gpu_sharing(gpu_sharing_text);

  const std::string output = options.output_path.empty() ? job.output.model : options.output_path;
  TrainingResult result;
  result.mode = job.training.mode;
  result.workers = num_workers;
  result.params = initial.num_params();
  result.device = device_label(options.gpus);
  result.gpu_sharing = gpu_sharing_text;
  if (sharing)
    result.codec_kernel = gpu_backends.empty() ? engine.name() : gpu_backends[0]->codec().name();
  Worker& lead = workers[0]->worker();
  const int64_t per_epoch = lead.batches_per_epoch();
  // Parameter-averaging rounds per epoch, the same on every node: from the smallest shard.
  const int64_t smallest_shard = data.train_source().size() / shards;
  const int64_t rounds_per_epoch = std::max<int64_t>(
      1, (smallest_shard + batch - 1) / batch /
             std::max<int64_t>(1, job.training.averaging_frequency));
  const int64_t total_iterations = per_epoch * job.training.epochs;
  std::vector<int64_t> iterations(num_workers, 0);  // each worker's own step count
  double elapsed_total = 0.0;
  DivergenceMonitor divergence(job);
  std::atomic<int64_t> epoch_samples{0};

  int64_t first_epoch = 0;
  NodeExchange::Resume resume;
  if (exchange && exchange->resume(resume)) {
    // Rejoining: every replica starts from a live node's parameters at an epoch end; updater
    // state and residuals start empty (they are per worker and died with the old process).
    for (auto& w : workers) {
      Model& m = w->worker().model();
      DTRAIN_CHECK(int64_t(resume.params.size()) == m.num_params() &&
                   int64_t(resume.state.size()) == m.num_state())
          << "snapshot of " << resume.params.size() << " parameters";
      m.set_params(resume.params.data());
      m.set_state(resume.state.data());
      if (sharing) w->encoder().threshold().set_tau(resume.tau);
    }
    first_epoch = resume.next_epoch;
    result.resumed = true;
    for (auto& it : iterations) it = first_epoch * per_epoch;
  }
  // A fresh run (not a resume, not a rejoin) starts a new series of checkpoints.
  if (options.write_model && !options.resume && !result.resumed) remove_checkpoints(output);
  // From a checkpoint: the parameters came with init_from; the position is the next minibatch.
  int64_t skip = 0;
  if (const ModelFile* from = options.resume) {
    first_epoch = std::max<int64_t>(0, from->epoch);
    // A cluster checkpoint is taken at an epoch end (its iteration counts takeover steps too).
    if (!exchange)
      skip = std::clamp<int64_t>(from->iteration - first_epoch * per_epoch, 0, per_epoch);
    if (skip == per_epoch) ++first_epoch, skip = 0;  // written at its epoch's last minibatch
    for (auto& it : iterations) it = first_epoch * per_epoch + skip;
    // The skipped minibatches' messages were sent before the checkpoint: under bsp or a bound
    // every worker would otherwise wait for them forever (a 2-worker resume once hung 10 min).
    if (skip > 0) gate.resumed_at(first_epoch, skip);
    // The lead worker's sharing state (the others' residuals were not saved: they start empty).
    if (sharing && from->has_sharing) {
      workers[0]->encoder().restore(from->residual, from->tau, from->encoder_steps);
      for (auto& w : workers) w->encoder().threshold().set_tau(from->tau);
    }
    // The other workers' own state, in an epoch-end checkpoint of as many workers (those of a
    // checkpoint with fewer start empty; a residual or state of another size is not taken).
    for (size_t w = 1; w < workers.size() && w - 1 < from->other_workers.size(); ++w) {
      const ModelFile::WorkerState& s = from->other_workers[w - 1];
      if (sharing && from->has_sharing)
        workers[w]->encoder().restore(s.residual, from->tau, s.encoder_steps);
      Updater& u = workers[w]->worker().updater();
      if (int64_t(s.updater_state.size()) == int64_t(u.host_state().size()) &&
          !s.updater_state.empty())
        u.set_state(s.updater_state);
    }
  }
  std::optional<EarlyStopping> early;
  if (job.training.early_stopping.enabled) early.emplace(job.training.early_stopping);
  Replica best;  // the best model so far, for early stopping
  for (int64_t epoch = first_epoch; epoch < job.training.epochs && !stop; ++epoch) {
    for (auto& w : workers) w->worker().start_epoch(epoch);
    if (epoch == first_epoch && skip > 0)
      for (auto& w : workers) w->worker().skip_batches(skip);
    const auto start = Clock::now();
    epoch_samples = 0;
    std::vector<WorkerEpoch> stats(num_workers);
    int64_t takeover_batches = 0, skipped_batches = 0;

    auto run = [&](int w) {
      WorkerEpoch& mine = stats[w];
      int64_t rounds_done = 0;
      const int64_t per_epoch_local = workers[w]->worker().batches_per_epoch();
      try {
        kernels::backend().set_num_threads(threads_per_worker);
        SharingWorker& sw = *workers[w];
        Worker& worker = sw.worker();
        const int64_t skipped = epoch == first_epoch ? skip : 0;
        int64_t in_epoch = skipped, in_epoch_own = skipped;
        while (!stop && !(options.cancel && *options.cancel)) {
          const int64_t it = iterations[w];
          const int64_t schedule_it = schedule_iteration(batching, it, shards, first_shard + w);
          WorkerStep step;
          step.start_unix_ms = std::chrono::duration<double, std::milli>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count();
          if (sharing) {
            if (!sw.step(it, schedule_it, epoch, in_epoch_own)) break;
            ++in_epoch_own;
            step.times = sw.last_times();
          } else {
            const auto t0 = Clock::now();
            if (!worker.compute_step(it, schedule_it)) break;
            worker.apply_own_step();
            const auto t1 = Clock::now();
            step.times.compute_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
            step.times.split_data(worker.last_data_ms());
            // Parameter averaging across nodes: every node runs the same number of rounds per
            // epoch (set by the smallest shard), spread evenly over its own minibatches, the
            // last one after its last minibatch, so all replicas agree at every epoch end.
            while (exchange && rounds_done < rounds_per_epoch &&
                   in_epoch + 1 >= (rounds_done + 1) * per_epoch_local / rounds_per_epoch) {
              average_round(*exchange, worker, job.training.average_updater_state,
                            regular_round(epoch, rounds_per_epoch, rounds_done));
              ++rounds_done;
            }
            step.times.wait_ms =
                std::chrono::duration<double, std::milli>(Clock::now() - t1).count();
          }
          // An fp16 step skipped because its loss overflowed has no loss to average.
          if (std::isfinite(worker.last_loss())) {
            mine.loss_sum += worker.last_loss() * worker.last_batch_size();
            mine.loss_samples += worker.last_batch_size();
          }
          mine.samples += worker.last_batch_size();
          const int64_t samples_now = epoch_samples += worker.last_batch_size();
          step.iteration = it;
          step.epoch = epoch;
          step.loss = worker.last_loss();
          step.samples = worker.last_batch_size();
          step.sharing = sharing;
          if (sharing) {
            step.codec = sw.encoder().last_stats();
            mine.messages += step.codec.messages;
            mine.message_bytes += step.codec.message_bytes;
          }
          listener.on_worker_step(w, step);
          ++iterations[w];
          if (w != 0) continue;
          // Worker 0 reports progress, checkpoints and enforces max_iterations.
          StepProgress p;
          p.epoch = epoch;
          p.epochs = job.training.epochs;
          p.iteration = it;
          p.iteration_in_epoch = in_epoch++;
          p.iterations_per_epoch = per_epoch;
          p.loss = worker.last_loss();
          if (std::isfinite(p.loss)) divergence.on_step(p.loss);
          p.diverging = divergence.diverging();
          const double elapsed = seconds_since(start);
          p.samples_per_sec = elapsed > 0 ? samples_now / elapsed : 0.0;
          const double per_iteration = (elapsed_total + elapsed) / double(it + 1);
          p.eta_seconds = per_iteration * double(std::max<int64_t>(0, total_iterations - it - 1));
          p.workers = num_workers;
          p.sharing = sharing;
          if (sharing) p.codec = sw.encoder().last_stats();
          listener.on_step(p);
          // A cluster job checkpoints at epoch ends instead (below): mid-epoch, the nodes'
          // replicas are not at one point of the job.
          if (job.output.checkpoint_every > 0 && options.write_model && !exchange &&
              iterations[0] % job.output.checkpoint_every == 0) {
            write_checkpoint(output,
                             snapshot(job, worker, data, iterations[0], epoch,
                                      sharing ? &sw.encoder() : nullptr),
                             job.output.keep_checkpoints);
            listener.on_checkpoint(checkpoint_path(output, iterations[0]), iterations[0]);
          }
          if (options.max_iterations >= 0 && iterations[0] >= options.max_iterations) stop = true;
        }
      } catch (...) {
        mine.error = std::current_exception();
        stop = true;
      }
    };
    on_every_worker(num_workers, run);
    for (const WorkerEpoch& s : stats)
      if (s.error) std::rethrow_exception(s.error);

    // Everyone has published everything for this epoch: apply what is still queued, so the
    // replicas agree before evaluation and before the next epoch.
    const bool cancelled = options.cancel && *options.cancel;
    if (exchange && sharing && !cancelled) {
      double tau_sum = 0.0;
      for (auto& w : workers) tau_sum += w->encoder().threshold().tau();
      const NodeExchange::EpochEnd end = exchange->end_epoch(epoch, tau_sum, num_workers);
      for (auto& w : workers) w->encoder().threshold().set_tau(
          static_cast<float>(end.tau_sum / std::max(1, end.workers)));
      result.lost_nodes = end.lost;
      if (local_data)
        skipped_batches = undone_batches(end, gate);  // its files are on no other node
      else
        takeover_batches =
            take_over(end, epoch, shards, batching, gate, workers, iterations, options.cancel);
      set_state(workers, exchange->end_takeover(epoch, state_sum(workers)));
    }
    for (auto& w : workers) w->apply_received();
    if (sharing && !exchange) average_tau(workers);
    average_state(workers);
    // Averaging: the last round of the epoch is done (the replicas agree). The live nodes meet,
    // do the minibatches of lost members and vacant slots between them and average once more
    // (every epoch, so that every node takes part in the round whatever it saw lost), then
    // admit restarted and joining nodes.
    if (exchange && !sharing && !cancelled) {
      const NodeExchange::EpochEnd end = exchange->end_epoch(epoch, 0.0, num_workers);
      result.lost_nodes = end.lost;
      takeover_batches = average_take_over(end, shards, batching, lead, iterations[0],
                                           options.cancel);
      average_round(*exchange, lead, job.training.average_updater_state,
                    takeover_round(epoch, rounds_per_epoch));
      set_state(workers, exchange->end_averaging_epoch(epoch, state_sum(workers)));
    }
    if (exchange && !cancelled)
      exchange->epoch_applied(epoch, lead.model().host_params(), lead.model().num_params(),
                              lead.model().host_state(), lead.model().num_state(),
                              workers[0]->encoder().threshold().tau());
    if (cancelled) stop = true;
    if (exchange && job.output.checkpoint_every > 0 && options.write_model && !cancelled) {
      // Every node's replica is the same here: the job's checkpoint is every node's file. At
      // least two are kept: a node a checkpoint ahead of the others must still hold the one
      // every node has (the job's consistent checkpoint) when the cluster goes down.
      write_checkpoint(output,
                       checkpoint(job, workers, data, iterations[0], epoch + 1,
                                  sharing),
                       std::max<int64_t>(2, job.output.keep_checkpoints));
      listener.on_epoch_checkpoint(checkpoint_path(output, iterations[0]), epoch + 1);
    }

    EpochSummary summary;
    summary.epoch = epoch;
    summary.replica = fingerprint(lead.model().host_params(), lead.model().num_params());
    summary.takeover_batches = takeover_batches;
    summary.skipped_batches = skipped_batches;
    summary.seconds = seconds_since(start);
    double loss_sum = 0.0;
    int64_t samples = 0, loss_samples = 0;
    for (const WorkerEpoch& s : stats) {
      loss_sum += s.loss_sum;
      samples += s.samples;
      loss_samples += s.loss_samples;
      result.messages += s.messages;
      result.message_bytes += s.message_bytes;
    }
    summary.train_loss = loss_samples ? loss_sum / loss_samples : 0.0;
    summary.samples_per_sec = summary.seconds > 0 ? samples / summary.seconds : 0.0;
    elapsed_total += summary.seconds;
    result.samples += samples;
    const bool early_evaluated = data.test.size() > 0 && early.has_value() && !cancelled;
    if (early_evaluated) {
      summary.evaluated = true;
      summary.eval = evaluate(lead.model(), data.test, job.evaluation.top_n);
      if (early->observe(epoch, summary.eval)) best = copy_replica(lead.model());
      if (early->should_stop()) {
        stop = true;
        result.stopped_early = early->reason();
      }
    }
    const bool last = epoch + 1 == job.training.epochs || stop;
    if (last && early_evaluated && early->has_best() && early->best_epoch() != epoch)
      for (auto& w : workers) restore_replica(w->worker().model(), best);
    if (data.test.size() > 0 && last && exchange) {
      // A cluster job's final evaluation is spread over the live nodes; the controller merges
      // the parts (Evaluation::merge adds counts, so the result is exact).
      const NodeExchange::EvaluationShard part = exchange->evaluation_shard();
      const int64_t n = data.test.size();
      result.final_eval = evaluate(lead.model(), data.test, job.evaluation.top_n, 256,
                                   n * part.index / part.count, n * (part.index + 1) / part.count);
      result.evaluated = true;
      result.eval_part = part.index;
      result.eval_parts = part.count;
      result.test_examples = n;
    } else if (data.test.size() > 0 &&
               ((options.evaluate_each_epoch && !early_evaluated) || last)) {
      summary.evaluated = true;
      summary.eval = evaluate(lead.model(), data.test, job.evaluation.top_n);
      result.final_eval = summary.eval;
      result.evaluated = true;
      result.test_examples = data.test.size();
    }
    listener.on_epoch(summary);
    result.epochs.push_back(summary);
    if (job.training.stop_on_divergence)
      if (auto diverged = divergence.check_epoch(
              epoch, summary.train_loss, summary.evaluated ? summary.eval.accuracy() : -1.0))
        throw UserError(*diverged, divergence.fix());
  }

  // Host copies of every replica (downloads on GPUs), compared element by element.
  std::vector<std::vector<float>> copies;
  std::vector<const float*> replicas;
  for (auto& w : workers) {
    const Model& m = w->worker().model();
    const float* params = m.host_params();
    copies.emplace_back(params, params + m.num_params());
  }
  for (const auto& c : copies) replicas.push_back(c.data());
  result.agreement = compare_replicas(replicas, initial.num_params());
  for (const auto& w : workers) result.messages_from_gpus += w->messages_from_gpus();
  if (gpu_sharing && !gpu_sharing->failure().empty())
    result.gpu_sharing += "; host memory since a round failed: " + gpu_sharing->failure();
  if (options.final_params) *options.final_params = copies[0];
  for (auto& w : workers) {
    result.max_ahead = std::max(result.max_ahead, w->max_ahead());
    if (const LossScaler* scaler = w->worker().loss_scaler())
      result.overflow_skipped_steps += scaler->skipped();
  }
  result.applied_digest = audit.digest();
  result.applied_messages = audit.count();
  if (audit.has_sum())
    result.audit_deviation = audit.relative_deviation(initial.params(), copies[0].data());
  result.iterations = iterations[0];
  result.train_seconds = elapsed_total;
  if (options.write_model) {
    write_model_file(output, snapshot(job, lead, data, iterations[0],
                                      first_epoch + static_cast<int64_t>(result.epochs.size())));
    result.model_path = output;
  }
  return result;
}

}  // namespace dtrain::core
