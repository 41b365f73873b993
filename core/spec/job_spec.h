#pragma once
// The job spec (docs/architecture/core.md, "Spec, data and files"), parsed and validated
// (job_spec_parser.h). Defaults here are the documented defaults.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/data/augment.h"
#include "core/layers/activation.h"
#include "core/layers/conv2d.h"
#include "core/layers/loss.h"
#include "core/layers/subsampling.h"
#include "core/layers/weight_init.h"
#include "core/spec/training_choices.h"
#include "core/tensor/tensor.h"
#include "core/util/data_roots.h"

namespace dtrain::core {

// One entry of model.layers. A layer reads the layer listed before it (the model input for the
// first) unless `inputs` names others: that is how graph models (docs/architecture/core.md
// "Graph models") are written. add and concat merge several inputs.
struct LayerSpec {
  enum class Kind { kDense, kConvolution, kSubsampling, kGlobalPooling, kBatchNorm, kDropout,
                    kOutput, kAdd, kConcat, kFlatten };
  Kind kind = Kind::kDense;
  std::string name;                // empty: unnamed (no other layer can name it as an input)
  std::vector<std::string> inputs; // empty: the previous layer; kModelInputName: the input
  int64_t units = 0;                            // dense, output
  // dense, output, batch_norm (default identity), add (default identity)
  Activation activation = Activation::kRelu;
  Loss loss = Loss::kMcxent;                    // output
  Conv2dOptions conv;                           // convolution
  PoolOptions pool;                             // subsampling
  bool global_max = false;                      // global_pooling
  float dropout_rate = 0.5f;                    // dropout
  float bn_decay = 0.9f;                        // batch_norm
  float bn_eps = 1e-5f;                         // batch_norm
  std::string location;                         // "file:line:col" for errors found later
};

// The name `inputs` uses for the model's input.
inline constexpr const char* kModelInputName = "input";

struct ScheduleSpec {
  enum class Type { kNone, kStep, kExponential };
  Type type = Type::kNone;
  double decay_rate = 0.5;  // step: lr * decay_rate^floor(iteration / step)
  int64_t step = 1000;
  double gamma = 0.999;     // exponential: lr * gamma^iteration
};

struct UpdaterSpec {
  std::string type = "nesterovs";  // sgd | nesterovs | adam | amsgrad | rmsprop
  double learning_rate = 0.1;
  double momentum = 0.9;     // nesterovs
  double beta1 = 0.9;        // adam, amsgrad
  double beta2 = 0.999;      // adam, amsgrad
  double epsilon = 1e-8;     // adam, amsgrad, rmsprop
  double rms_decay = 0.95;   // rmsprop
  ScheduleSpec schedule;
};

struct ModelSpec {
  Shape input;
  std::vector<LayerSpec> layers;
  UpdaterSpec updater;
  WeightInit weight_init = WeightInit::kXavier;
  double l2 = 0.0;
  // Fine-tuning (core/train/init_from.h): start from a trained .dtm's parameters (and batch-norm
  // statistics) instead of weight_init; with init_from_updater also its updater state.
  std::string init_from;
  bool init_from_updater = false;
  // A cluster node's data_roots (null: none), which the init_from file is checked against as
  // it is opened; not for the job's own checkpoint, which the node itself resumes from.
  std::shared_ptr<const DataRoots> init_from_roots;
};

struct DataSourceSpec {
  std::string format;        // idx | csv | images
  std::string images;        // idx
  std::string labels;        // idx
  // csv: the file; images: the folder of class subfolders; packed: a glob of an export's files
  std::string path;
  // packed, node-local (data.train only): a glob of the export's files each node holds; `{node}`
  // in it becomes the node's name. The controller gives every file to one node that holds it.
  std::string shards;
  bool skip_corrupt = false; // images: skip an unreadable image (listed) instead of failing
  // A cluster node's data_roots (null: none): every file of the source is checked against them
  // as it is opened, and an image folder's links are refused.
  std::shared_ptr<const DataRoots> roots;
  int64_t label_column = -1; // csv: class label column, -1 = last
  bool header = false;       // csv: skip the first line
  // csv `labels: regression`: the labels are values, as many columns as the output layer has
  // units, starting at label_column (-1: the last columns); `labels: classes` by default.
  bool regression = false;
  bool present() const { return !format.empty(); }
};

struct DataSpec {
  DataSourceSpec train;
  DataSourceSpec test;
  std::string normalize = "none";  // none | scale | standardize | per_channel
  Augmentation augment;            // training examples only (core/data/augment.h)
};

struct ThresholdSpec {
  std::string algorithm = "adaptive";  // adaptive | target_sparsity | fixed
  double initial = 1e-3;
  double min_sparsity = 1e-4;
  double max_sparsity = 1e-2;
  double target_sparsity = 1e-3;
};

struct ResidualSpec {
  bool clip = true;          // false: "residual: none"
  double clip_multiple = 5;
  int64_t every = 5;
};

// Staleness control for gradient sharing (docs/architecture/core.md, "Staleness and corrections"):
// a worker starts minibatch b of an epoch only once it has applied the messages of
// minibatches 0..b-bound of every live worker. bound 0 is `async` (never waits); `bsp` is
// bound 1 (all of step t before step t+1).
// `sync: {local: ...}` (docs/architecture/core.md, "Local steps"): each worker takes `steps`
// minibatches on its own replica, then the replicas' pseudo-gradient (global - local) is
// threshold-encoded with its own residual, summed over the nodes and applied to the global
// parameters by the outer optimizer (DiLoCo, Douillard et al. 2023: Nesterov, lr 0.7,
// momentum 0.9), the same step on every node.
struct OuterOptimizerSpec {
  std::string type = "nesterov";  // nesterov | sgd (plain averaging at learning_rate 1)
  double learning_rate = 0.7;
  double momentum = 0.9;
};
constexpr int64_t kMaxPseudoGradientLevels = 8;  // messages a round (a mesh payload's bound)
struct LocalStepsSpec {
  int64_t steps = 50;      // inner steps per round (H)
  OuterOptimizerSpec outer;
  // Share of the pseudo-gradient's elements sent each round at the first level's threshold tau
  // (the rest waits in the residual); 1 sends every element that is not exactly zero. A low
  // density keeps tau high, so the levels move the largest elements by up to 2 tau a round:
  // 0.001 against 0.03 took LeNet from 0.771 to 0.857 after one epoch with 0.73-0.79 of the bytes
  // (docs/performance.md, "Local steps' encoding").
  double density = 0.001;
  // Messages a round, at tau, tau/2, tau/4, ...: each sends what the residual still holds at
  // its threshold, so `levels` messages carry a magnitude of `levels` bits besides the sign.
  int64_t levels = 4;
  // The exchange of round r runs while the replicas take round r+1's steps, and its outer step
  // is applied one round late (each epoch's last round is not overlapped).
  bool overlap = false;
};

// A spec file without `training.sync` gets `auto` for gradient sharing (the parser); a
// TrainingSpec made in code starts at bsp.
struct SyncSpec {
  std::string mode = "bsp";  // async | bounded | bsp | local | auto (chosen at the start)
  int64_t bound = 1;
  LocalStepsSpec local;      // mode local
};

// Corrections that keep sparse training accurate (DGC, Lin et al. 2018; Goyal et al. 2017).
// The defaults are DGC's set, chosen from tools/bench/convergence (docs/performance.md,
// "Convergence at scale"): neutral up to 6 workers, 2 to 8 points of accuracy at 12 and 24.
struct CorrectionsSpec {
  // Clear the updater's momentum of every element a message sent (its residual was sent too).
  bool momentum_masking = true;
  // Each worker clips its gradient to L2 norm clip_norm / sqrt(workers) before its updater;
  // 0 = off.
  double clip_norm = 5.0;
  // Sparsity warm-up: over the first `warmup_epochs` the threshold aims at densities from
  // `start_density` down to the configured band (exponentially); 0 epochs = off.
  double sparsity_warmup_epochs = 1.0;
  double sparsity_warmup_start = 1.0 / 16.0;
  // The job's step is the sum of every worker's step. linear: each worker keeps the learning
  // rate (the sum is W times it, Goyal's linear scaling); sqrt: lr * sqrt(W) in all; none: the
  // sum equals one worker's lr. lr_warmup_epochs ramps from `none` to the rule linearly.
  std::string lr_scaling = "linear";  // linear | sqrt | none
  double lr_warmup_epochs = 1.0;
};

// training.early_stopping (core/train/early_stopping.h): stop after `patience` evaluations
// (one per epoch) without an improvement of more than min_delta; the best model is kept.
struct EarlyStoppingSpec {
  bool enabled = false;
  std::string metric = "accuracy";  // accuracy (higher is better) | loss (lower is better)
  int64_t patience = 3;
  double min_delta = 0.0;
};

// training.allreduce (mode allreduce; docs/user-guide.md, "Dense all-reduce"): the buckets a
// step's gradient goes over the ring in (core/train/gradient_buckets.h). 0: one bucket, sent when
// the backward pass ends.
struct AllreduceSpec {
  double bucket_mb = kDefaultBucketMb;
  static constexpr double kDefaultBucketMb = 1.0;
};

struct TrainingSpec {
  TrainingMode mode = TrainingMode::kGradientSharing;
  int64_t epochs = 1;
  // The job's minibatch, split over its workers (core/train/batch_split.h); 0 when
  // batch_size_per_worker fixes each worker's instead. Exactly one of the two is set.
  int64_t batch_size = 32;
  int64_t batch_size_per_worker = 0;
  int64_t nodes = 0;             // 0 = all; with nodes_max, the fewest the job runs on
  // Elastic membership (`nodes: {min, max}`, docs/architecture/daemon.md "Elastic membership"): the
  // job starts once `nodes` are there and takes later ones up to this many; 0 = exactly `nodes`.
  int64_t nodes_max = 0;
  int64_t workers_per_node = 0;  // 0 = auto (one per GPU on GPU nodes, else up to 8 per node)
  // A share of each node, so that other jobs run beside this one (docs/user-guide.md, "Sharing
  // nodes between jobs"): this many of a node's cores, and of its GPUs (a job with GPUs trains on
  // them; one with cores only, on the CPU). Both 0 (the default): the job takes whole nodes.
  int64_t cores_per_node = 0, gpus_per_node = 0;
  bool shares_nodes() const { return cores_per_node > 0 || gpus_per_node > 0; }
  // Where workers run (docs/architecture/core.md, "The model"): cpu, gpu (every node of the job
  // needs a GPU) or auto (GPUs where a node has them, the CPU elsewhere).
  Device device = Device::kAuto;
  // Mixed precision on GPU workers (docs/architecture/kernels.md, "Mixed precision"): fp32 | bf16 |
  // fp16. Matrix products and convolutions take bf16/fp16 inputs and accumulate in fp32;
  // parameters, gradients, updater state, residual and codec stay fp32. fp16 adds dynamic loss
  // scaling (core/train/loss_scaler.h). CPU workers of an auto job compute in fp32.
  kernels::Precision precision = kernels::Precision::kFp32;
  ThresholdSpec threshold;
  ResidualSpec residual;
  std::string mesh = "plain";    // plain | mesh
  int64_t averaging_frequency = 5;
  bool average_updater_state = false;  // parameter_averaging: momentum/moments averaged too
  SyncSpec sync;                  // gradient_sharing only
  AllreduceSpec allreduce;        // allreduce (and auto) only
  CorrectionsSpec corrections;    // gradient_sharing only
  // Stop a job whose loss rises far above its best or whose accuracy falls to chance.
  bool stop_on_divergence = true;
  // Keep a double-precision sum of every message applied and check the replica against it.
  bool audit_updates = false;
  EarlyStoppingSpec early_stopping;
};

struct EvaluationSpec {
  int64_t top_n = 1;
};

struct OutputSpec {
  std::string model;             // path of the .dtm written at the end
  int64_t checkpoint_every = 0;  // iterations; 0 = no checkpoints
  int64_t keep_checkpoints = 2;  // the newest ones kept beside the model (core/train/checkpoints.h)
};

struct JobSpec {
  std::string name;
  uint64_t seed = 12345;
  ModelSpec model;
  DataSpec data;
  TrainingSpec training;
  EvaluationSpec evaluation;
  OutputSpec output;
  std::string source_text;  // the YAML as given (stored in model files)
  std::string source_name;  // file name used in error messages

  // The model predicts values (csv `labels: regression`) rather than classes.
  bool regression() const { return data.train.regression; }
};

}  // namespace dtrain::core
