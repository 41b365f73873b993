#pragma once
// One training run of a job on this process's workers (dtrain-submit --local, or one node's part
// of a cluster job through a NodeExchange): loads the data, restores where it starts from, runs
// the epochs on workers_per_node worker threads (gradient sharing between them through memory,
// docs/architecture/core.md, "Sharing"), ends each epoch on the cluster, evaluates, checkpoints and
// writes the model file. Its phases are the private methods below, in the order run() calls them.
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/codec/codec_engine.h"
#include "core/model/model.h"
#include "core/spec/job_spec.h"
#include "core/train/batch_split.h"
#include "core/train/divergence_monitor.h"
#include "core/train/early_stopping.h"
#include "core/train/gpu_sharing.h"
#include "core/train/gradient_rounds.h"
#include "core/train/local_steps.h"
#include "core/train/node_round.h"
#include "core/train/message_bus.h"
#include "core/train/replica_state.h"
#include "core/train/sharing_worker.h"
#include "core/train/step_gate.h"
#include "core/train/training_data.h"
#include "core/train/training_types.h"
#include "core/train/update_audit.h"
#include "kernels/backend.h"

namespace dtrain::core {

// workers_per_node resolved for this machine's CPU (core/spec/workers_per_node.h).
int resolve_workers_per_node(const JobSpec& job);
// The kernel threads each of a node's `workers` computes with: the node's `threads` (0: its
// cores) shared among them, at least one.
int threads_per_worker(int threads, int workers);

class TrainingRun {
 public:
  // Builds the workers: checks the job fits this node's memory, loads the data, makes the
  // initial model (init_from included), the GPU backends and the workers. Throws UserError for
  // what the user can fix (a job too large, a missing file, an unusable GPU).
  TrainingRun(const JobSpec& job, TrainingListener& listener, const LocalTrainingOptions& options);
  ~TrainingRun();
  TrainingRun(const TrainingRun&) = delete;
  TrainingRun& operator=(const TrainingRun&) = delete;

  // Trains to the end (or to a stop, a cancel, early stopping); call once.
  TrainingResult run();

 private:
  using Clock = std::chrono::steady_clock;
  // One worker's place in the epoch it runs.
  struct WorkerCursor {
    int64_t in_epoch = 0;      // minibatches of the epoch done (counted by the lead worker)
    int64_t in_epoch_own = 0;  // of its own shard
    int64_t rounds_done = 0;   // parameter-averaging rounds (allreduce: steps) of the epoch
    int64_t batches = 0;       // in its shard this epoch
  };
  // Per-worker results of one epoch, written only by that worker's thread.
  struct WorkerEpoch {
    double loss_sum = 0.0;
    int64_t samples = 0;
    int64_t loss_samples = 0;  // samples whose loss is known (an fp16 step may have none)
    int64_t messages = 0, message_bytes = 0;
    double compute_ms = 0.0;  // its steps' StepTimes::compute_ms
    std::exception_ptr error;
  };
  struct EpochRun {
    int64_t epoch = 0;
    Clock::time_point start;
    int64_t skipped = 0;  // minibatches done before the checkpoint this run resumed from
    std::vector<WorkerEpoch> workers;
    bool cancelled = false;  // when the workers stopped
    int64_t takeover_batches = 0, skipped_batches = 0, missed_batches = 0;
    bool averaged_densely = false;  // local steps, allreduce: the replicas differed at its end
  };

  // Setup (the constructor).
  static TrainingData load_data(const JobSpec& job, int workers,
                                const LocalTrainingOptions& options);
  std::vector<int64_t> shard_batches() const;
  void build_gpu_sharing();
  void build_workers();
  // Restore: where the run starts.
  void attach_exchange();
  void start_result();
  void restore();
  void rejoin_from_live_node();
  void take_updater_state(const std::vector<float>& state);
  void resume_from_checkpoint(const ModelFile& from);
  void start_local_steps();
  ModelFile with_local_steps(ModelFile f);
  void announce_start();
  // An epoch.
  void run_epoch(int64_t epoch);
  void run_worker(int w, EpochRun& e);
  bool take_step(int w, EpochRun& e, WorkerCursor& cursor, WorkerStep& step);
  bool averaging_step(int w, EpochRun& e, WorkerCursor& cursor, int64_t iteration,
                      int64_t schedule_iteration, WorkerStep& step);
  bool allreduce_step(int w, EpochRun& e, WorkerCursor& cursor, WorkerStep& step);
  void build_gradient_rounds();
  void sum_on_devices();
  void local_round(int64_t round, bool last_of_epoch);
  std::vector<float> mean_replica();
  int64_t record_step(int w, EpochRun& e, WorkerStep& step);
  void lead_step(EpochRun& e, WorkerCursor& cursor, int64_t iteration, int64_t samples_now);
  void checkpoint_mid_epoch(int64_t epoch);
  // The epoch's end.
  void end_epoch(EpochRun& e);
  void end_sharing_epoch_on_cluster(EpochRun& e);
  void end_averaging_epoch_on_cluster(EpochRun& e);
  void copy_lead_to_other_workers();
  // true: they differed, averaged densely (in averaging round `round`).
  bool agree_on_global_state(int64_t epoch, int64_t round);
  void write_epoch_checkpoint(int64_t epoch);
  EpochSummary summarize(const EpochRun& e);
  bool observe_early_stopping(const EpochRun& e, EpochSummary& summary);
  void evaluate_epoch(const EpochRun& e, EpochSummary& summary);
  void check_divergence(const EpochSummary& summary);
  // The result.
  TrainingResult finish();
  std::vector<float> compare_replicas_into_result();
  void write_final_model();

  bool cancelled() const { return options_.cancel && *options_.cancel; }
  Worker& lead() { return workers_[0]->worker(); }

  const JobSpec& job_;
  TrainingListener& listener_;
  const LocalTrainingOptions& options_;
  NodeExchange* const exchange_;
  const NodeLocalData* const local_data_;
  const bool sharing_;
  // parameter_averaging resolves to one worker (the parser refuses asking it for more).
  const int num_workers_;
  const int threads_per_worker_;
  TrainingData data_;
  // The replicas' starting point: weight_init from the seed, or init_from (fine-tuning).
  struct Initial {
    Model model;
    std::vector<float> updater_state;
    explicit Initial(const JobSpec& job);
  } initial_;
  const CodecEngine& engine_;
  const int first_shard_, shards_;
  // Every worker runs the per-worker form of the spec: its batch, and for a split batch the
  // learning rate and clipping that make W workers' steps one step of the job's batch.
  const JobSpec worker_job_;
  const WorkerBatch batching_;
  const int64_t batch_;
  StepGate gate_;
  MessageBus bus_;
  std::atomic<bool> stop_{false};
  UpdateAudit audit_;
  // Declared before the workers, so that their models (in GPU memory) go first.
  std::vector<std::unique_ptr<kernels::Backend>> gpu_backends_;
  // GPU to GPU between this node's GPU workers where a device group forms (NCCL), else host
  // memory; the result says which.
  std::string gpu_sharing_text_;
  std::unique_ptr<GpuSharing> gpu_sharing_;
  // Undelivered messages (and their device buffers) go before the group and the backends do.
  struct BusRelease {
    MessageBus& bus;
    ~BusRelease();
  } bus_release_{bus_};
  SharingWorkers workers_;
  // The exchange delivers from the network's thread into the bus: it lets go of it before the
  // workers and the bus go, also when training throws.
  struct ExchangeRelease {
    NodeExchange* exchange = nullptr;
    ~ExchangeRelease();
  } exchange_release_;

  const std::string output_;
  TrainingResult result_;
  int64_t per_epoch_ = 0, rounds_per_epoch_ = 1, total_iterations_ = 0;
  std::vector<int64_t> iterations_;  // each worker's own step count
  double elapsed_total_ = 0.0;
  DivergenceMonitor divergence_;
  std::atomic<int64_t> epoch_samples_{0};
  int64_t first_epoch_ = 0;
  int64_t skip_ = 0;  // minibatches of the first epoch a checkpoint had done
  std::optional<EarlyStopping> early_;
  Replica best_;  // the best model so far, for early stopping
  // sync: {local: ...}: the global parameters and the outer optimizer, made once the run
  // knows where it starts (restore).
  std::unique_ptr<LocalSteps> local_;
  std::vector<float> rejoin_momentum_;  // from a live node's snapshot
  NodeRound node_round_{num_workers_};
  // mode allreduce: the node's steps (null in the other modes), and the steps an epoch of the
  // job has (its largest shard's minibatches), which number the updater's steps alike on every
  // replica.
  std::unique_ptr<GradientRounds> reduce_;
  std::string allreduce_plan_text_;  // describe_buckets'
  int64_t steps_per_epoch_ = 0;
  // A rejoined node's starting point: its audit measures the deviation from here (empty: the
  // initial parameters).
  std::vector<float> audit_base_;
};

// Trains `job` to the end: TrainingRun(job, listener, options).run().
TrainingResult train_local(const JobSpec& job, TrainingListener& listener,
                           const LocalTrainingOptions& options);

}  // namespace dtrain::core
