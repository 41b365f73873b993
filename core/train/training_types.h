#pragma once
// What a training run takes and gives (core/train/training_run.h): its options, the listener
// that sees its steps and epochs, and its result.
#include <atomic>
#include <string>
#include <vector>

#include "core/codec/update_encoder.h"
#include "core/eval/evaluation.h"
#include "core/io/model_file.h"
#include "core/spec/job_spec.h"
#include "core/train/node_exchange.h"
#include "core/train/replica_agreement.h"
#include "core/train/sharing_worker.h"
#include "core/train/step_stats.h"
#include "core/train/test_fault.h"

namespace dtrain::core {

struct StepProgress {
  int64_t epoch = 0, epochs = 0;  // epoch is 0-based
  int64_t iteration = 0;          // global, 0-based
  int64_t iteration_in_epoch = 0, iterations_per_epoch = 0;
  double loss = 0.0;              // mean loss of this step's minibatch
  double samples_per_sec = 0.0;   // over the epoch so far
  double eta_seconds = 0.0;       // to the end of training
  int workers = 1;
  bool sharing = false;           // gradient sharing: `codec` holds worker 0's figures
  bool diverging = false;         // the smoothed loss is far above its best (DivergenceMonitor)
  CodecStepStats codec;
};

struct EpochSummary {
  int64_t epoch = 0;
  double train_loss = 0.0;  // mean over the epoch
  double seconds = 0.0;     // training time, evaluation excluded
  double samples_per_sec = 0.0;
  // The share of the workers' time this epoch spent on their steps' forward, backward and
  // updater (the rest: reading data, encoding, applying others' updates, waiting for the
  // exchange). Like samples_per_sec it leaves out minibatches taken over from lost nodes at the
  // epoch's end, whose time is in `seconds`; for GPU workers it is the host's time to issue a
  // step's kernels and read its loss.
  double compute_share = 0.0;
  bool evaluated = false;
  Evaluation eval;          // on the test set
  int64_t takeover_batches = 0;  // a lost node's minibatches this node did (cluster jobs)
  // Node-local data: a lost node's minibatches left undone (its files are on no other node).
  int64_t skipped_batches = 0;
  // Gradient sharing on a cluster: lost nodes' minibatches whose updates other survivors applied
  // and this node never received (core/train/node_exchange.h, EpochEnd::missed_batches).
  int64_t missed_batches = 0;
  // Local steps on a cluster: the nodes' replicas differed at the epoch's end (a node lost, a
  // lost node's minibatches done) and were averaged densely; they agree bit for bit otherwise.
  bool averaged_densely = false;
  ReplicaFingerprint replica;    // worker 0's parameters once every update of the epoch is in
};

struct TrainingResult {
  TrainingMode mode = TrainingMode::kGradientSharing;
  int workers = 1;
  std::string codec_kernel;            // gradient sharing only
  std::string device = "cpu";          // where the workers ran: cpu, or "gpu 0, 1"
  // GPU workers sharing gradients: how this node's workers reached each other ("nccl 2.28.9
  // between GPUs 0, 1", or "host memory (why not GPU to GPU)"); empty otherwise.
  std::string gpu_sharing;
  int64_t messages_from_gpus = 0;      // messages workers applied with their words arrived GPU to GPU
  // training.precision fp16: steps the loss scaler skipped because their gradients overflowed.
  int64_t overflow_skipped_steps = 0;
  ReplicaAgreement agreement;          // after the last step, every message applied
  std::vector<std::string> lost_nodes; // cluster jobs: nodes declared lost during training
  int64_t params = 0;
  int64_t messages = 0;                // produced by all workers
  int64_t message_bytes = 0;
  std::vector<EpochSummary> epochs;
  std::string stopped_early;           // why training.early_stopping ended it ("" if it did not)
  Evaluation final_eval;
  bool evaluated = false;
  // Cluster jobs: final_eval covers part eval_part of eval_parts of the test set (the
  // controller merges the parts); test_examples is the whole set.
  int eval_part = 0, eval_parts = 1;
  int64_t test_examples = 0;
  std::string model_path;   // empty when not written
  int64_t iterations = 0;
  double train_seconds = 0.0;
  // Gradient sharing: the most steps a worker was ahead of a live worker's applied messages
  // (<= training.sync's bound), and worker 0's audit (update_audit.h): the messages it applied
  // (count, order-independent digest of their ids) and, with training.audit_updates, how far
  // its replica is from the initial parameters minus their sum (relative L2; -1 when not kept).
  int64_t max_ahead = 0;
  bool resumed = false;  // a rejoined node: its replica started from a live node's snapshot
  // applied_digest and applied_messages count every update in this replica: from the start, or
  // from the snapshot's totals (a rejoined node); false for a snapshot that came without them.
  bool audited = true;
  uint64_t applied_digest = 0;
  int64_t applied_messages = 0;
  double audit_deviation = -1.0;
  int64_t samples = 0;
};

// Where a run's first step starts: the lead worker's replica after the restore (a checkpoint,
// a rejoin's snapshot, init_from, or the initial parameters). Valid during the call only.
struct StartPoint {
  int64_t epoch = 0;      // 0-based, the first to run
  int64_t iteration = 0;  // the lead worker's steps already done
  bool restored = false;  // from a checkpoint or a live node's snapshot
  const float* params = nullptr;
  int64_t num_params = 0;
  const float* state = nullptr;  // batch-norm running statistics
  int64_t num_state = 0;
  // Local steps, when restored: the outer optimizer's momentum and this node's residual (empty
  // otherwise).
  std::vector<float> outer_momentum, local_residual;
};

class TrainingListener {
 public:
  virtual ~TrainingListener() = default;
  virtual void on_data_loaded(int64_t train_examples, int64_t test_examples, int64_t params) {}
  // Once, before the first step (checks that a resumed replica is the checkpoint's, bit for bit).
  virtual void on_start(const StartPoint& start) {}
  // Before training, on a node with GPU workers sharing or summing gradients: how they reach
  // each other (TrainingResult::gpu_sharing), so a fallback to host memory is said, with why, up
  // front; and (mode allreduce) from a worker's thread if their device group fails later.
  virtual void on_gpu_sharing(const std::string& how) {}
  // Before training, mode allreduce: how a step's gradient goes (core/train/gradient_buckets.h).
  virtual void on_allreduce_plan(const std::string& how) {}
  // From worker 0's thread while the workers run.
  virtual void on_step(const StepProgress& progress) {}
  // From each worker's thread after each of its steps (metrics, the stats history); must be
  // thread-safe.
  virtual void on_worker_step(int worker, const WorkerStep& step) {}
  virtual void on_epoch(const EpochSummary& summary) {}
  virtual void on_checkpoint(const std::string& path, int64_t iteration) {}
  // A cluster job's checkpoint, taken at an epoch end (where the replicas agree): training can
  // go on from it at `next_epoch` (0-based).
  virtual void on_epoch_checkpoint(const std::string& path, int64_t next_epoch,
                                   const ModelFile& written) {}
};

// The files this node trains from, and for every member of the job (member order, as the
// exchange has them) its examples and workers: each worker's shard is its part of its own
// node's examples, and the step gate knows every worker's minibatch count from them.
struct NodeLocalData {
  std::vector<std::string> files;
  std::vector<int64_t> member_examples;
  std::vector<int> member_workers;
  int self = 0;  // this node's index in the member lists
};

struct LocalTrainingOptions {
  int threads = 0;              // kernel threads; 0 = all cores
  bool write_model = true;
  std::string output_path;      // overrides output.model when set
  int64_t max_iterations = -1;  // stop early (benchmarks); -1 = run all epochs
  bool evaluate_each_epoch = true;
  // Called with every message produced, from the producing thread (tests audit the invariant
  // with it); must be thread-safe.
  MessageObserver message_observer;
  // This node's part of a cluster job (gradient sharing with other nodes); null: this process
  // trains alone.
  NodeExchange* exchange = nullptr;
  // When set, receives the final parameters of worker 0 (cluster jobs compare replicas).
  std::vector<float>* final_params = nullptr;
  // Set from another thread to stop at the next step (a cancelled job).
  const std::atomic<bool>* cancel = nullptr;
  // GPU workers: worker w runs on GPU gpus[w % gpus.size()], each with its own backend
  // (stream); empty: every worker on the CPU (core/train/device_placement decides).
  std::vector<int> gpus;
  // Resuming from a checkpoint (core/train/checkpoints.h): the caller puts its path in
  // job.model.init_from (with init_from_updater: parameters, statistics, updater state) and the
  // checkpoint here (its position and gradient-sharing state). Training goes on from the next
  // minibatch. Null: a fresh start.
  const ModelFile* resume = nullptr;
  // Node-local data (data.train.shards) on a cluster node: the controller's plan. Null: the
  // files the pattern matches here (alone), or data every node reads whole.
  const NodeLocalData* local_data = nullptr;
  // A fault the lead worker injects on purpose (core/train/test_fault.h): only the daemon sets
  // it, from DTRAIN_TEST_FAULT, and says so in its log.
  TestFault test_fault;
};

}  // namespace dtrain::core
