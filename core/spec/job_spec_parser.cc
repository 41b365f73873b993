#include "core/spec/job_spec_parser.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/model/model_builder.h"
#include "core/data/packed_file.h"
#include "core/spec/layer_parser.h"

namespace dtrain::core {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
std::string resolve(const std::string& base_dir, const std::string& path) {
  if (path.empty() || path[0] == '/' || base_dir.empty() || base_dir == ".") return path;
  return base_dir + "/" + path;
}

class JobSpecParser {
 public:
  JobSpecParser(const std::string& source_name, const SpecParseOptions& options)
      : r_(source_name, options.refuse_repeated_keys), options_(options) {}

  JobSpec parse(const YAML::Node& root) {
    JobSpec job;
    r_.expect_map(root, "", {"name", "seed", "model", "data", "training", "evaluation", "output"});
    job.name = r_.text(root, "name", "", std::nullopt);
    for (char c : job.name)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.')
        r_.fail(root["name"], "name", "'" + job.name + "' contains '" + std::string(1, c) + "'",
                "use letters, digits, '-', '_' and '.' only");
    job.seed = static_cast<uint64_t>(r_.integer(root, "seed", "", 12345, 0, INT64_MAX));
    if (!root["model"]) r_.fail(root, "model", "missing required section", "add a model: section");
    job.model = parse_model(root["model"]);
    if (!root["data"]) r_.fail(root, "data", "missing required section", "add a data: section");
    job.data = parse_data(root["data"]);
    if (job.data.augment.active() && job.model.input.size() != 3)
      r_.fail(root["data"]["augment"], "data.augment",
              "augmentation crops and flips images, but model.input is " +
                  shape_string(job.model.input),
              "use it with [channels, height, width] inputs, or remove data.augment");
    job.training = parse_training(root["training"]);
    if (job.regression()) check_regression(root, job);
    if (!job.data.train.shards.empty()) check_node_local(root, job);
    job.evaluation = parse_evaluation(root["evaluation"], job.model);
    job.output = parse_output(root["output"], job.name);
    return job;
  }

 private:
  // data.train.shards: a node's minibatches come from its own files only, so a lost node's
  // cannot be taken over (they are skipped), and a slot without a node has no data.
  void check_node_local(const YAML::Node& root, const JobSpec& job) {
    const YAML::Node shards = root["data"]["train"]["shards"];
    if (!shares_every_step(job.training) && !reduces_every_step(job.training) &&
        !mode_is_auto(job.training))
      r_.fail(shards, "data.train.shards",
              "node-local shards train with gradient sharing every step or allreduce only in "
              "this release",
              "set training.mode: gradient_sharing with a sync other than local, or allreduce, "
              "or give data.train a path instead");
    if (job.training.nodes_max > 0)
      r_.fail(shards, "data.train.shards",
              "an elastic job (training.nodes: {min, max}) cannot use node-local shards: a node "
              "joining later holds none of the files dealt out at the start",
              "give training.nodes a count, or data.train a path");
  }

  // `labels: regression` (docs/user-guide.md, "Regression"): the test set's labels are values too,
  // the output layer predicts them with the squared error, and early stopping watches the loss.
  void check_regression(const YAML::Node& root, JobSpec& job) {
    const YAML::Node data = root["data"];
    const LayerSpec& out = job.model.layers.back();
    if (out.loss != Loss::kMse)
      r_.fail(data["train"]["labels"], "data.train.labels",
              "regression labels need the output layer's loss mse, it has " + loss_name(out.loss),
              "write the output layer as '- output: {units: " + std::to_string(out.units) +
                  ", activation: identity, loss: mse}'");
    DataSourceSpec& test = job.data.test;
    if (test.present() && test.format != "csv")
      r_.fail(data["test"], "data.test",
              "data.train has regression labels but data.test is " + test.format + " data",
              "give data.test as CSV with 'labels: regression' too");
    if (test.present() && !test.regression && data["test"]["labels"])
      r_.fail(data["test"]["labels"], "data.test.labels",
              "data.train has regression labels, data.test class labels",
              "set 'labels: regression' on both");
    test.regression = test.present();  // a CSV test set follows the training set's labels
    EarlyStoppingSpec& early = job.training.early_stopping;
    if (early.enabled && early.metric == "accuracy") {
      const YAML::Node metric = root["training"]["early_stopping"]["metric"];
      if (metric)
        r_.fail(metric, "training.early_stopping.metric",
                "a regression model has no accuracy", "use 'metric: loss' (the test MSE)");
      early.metric = "loss";
    }
  }

  ModelSpec parse_model(const YAML::Node& node) {
    ModelSpec m;
    r_.expect_map(node, "model", {"input", "layers", "updater", "weight_init", "l2",
                                  "init_from", "init_from_updater"});
    const YAML::Node input = node["input"];
    if (!input || !input.IsSequence() || (input.size() != 1 && input.size() != 3))
      r_.fail(input ? input : node, "model.input",
              "expected [features] or [channels, height, width]",
              "write e.g. 'input: [784]' or 'input: [1, 28, 28]'");
    m.input = r_.int_list(node, "input", "model", {}, input.size(), 1);
    m.weight_init = parse_weight_init(
        r_.choice(node, "weight_init", "model", std::string("xavier"), weight_init_names()));
    m.l2 = r_.number(node, "l2", "model", 0.0, 0.0, 1.0, false);
    m.updater = parse_updater(node["updater"]);
    if (node["init_from"]) {
      m.init_from = existing_file(node, "init_from", "model");
      m.init_from_roots = roots_for_reading();
    }
    m.init_from_updater = r_.boolean(node, "init_from_updater", "model", false);
    if (m.init_from_updater && m.init_from.empty())
      r_.fail(node["init_from_updater"], "model.init_from_updater",
              "init_from_updater needs model.init_from", "add 'init_from: model.dtm' or drop it");

    m.layers = parse_layers(r_, node);
    try {
      // The graph must be wired and its shapes must fit: an unknown input, a cycle or a kernel
      // larger than its input is found here.
      infer_layer_shapes(m);
    } catch (const LayerError& e) {
      r_.fail(node["layers"][e.layer_index()], "model.layers[" + std::to_string(e.layer_index()) + "]",
              e.what_happened(), e.fix());
    }
    return m;
  }

  UpdaterSpec parse_updater(const YAML::Node& node) {
    UpdaterSpec u;
    if (!node) return u;
    const std::string p = "model.updater";
    r_.expect_map(node, p, {"type", "learning_rate", "momentum", "beta1", "beta2", "epsilon",
                            "rms_decay", "schedule"});
    u.type = r_.choice(node, "type", p, u.type, {"sgd", "nesterovs", "adam", "amsgrad", "rmsprop"});
    const double default_lr = (u.type == "adam" || u.type == "amsgrad" || u.type == "rmsprop")
                                  ? 1e-3 : 0.1;
    u.learning_rate = r_.number(node, "learning_rate", p, default_lr, 0.0, 100.0, true);
    u.momentum = r_.number(node, "momentum", p, 0.9, 0.0, 1.0, false);
    u.beta1 = r_.number(node, "beta1", p, 0.9, 0.0, 1.0, false);
    u.beta2 = r_.number(node, "beta2", p, 0.999, 0.0, 1.0, false);
    u.epsilon = r_.number(node, "epsilon", p, 1e-8, 0.0, 1.0, true);
    u.rms_decay = r_.number(node, "rms_decay", p, 0.95, 0.0, 1.0, false);
    const YAML::Node s = node["schedule"];
    if (s) {
      const std::string sp = p + ".schedule";
      r_.expect_map(s, sp, {"type", "decay_rate", "step", "gamma"});
      const std::string t = r_.choice(s, "type", sp, std::nullopt, {"none", "step", "exponential"});
      u.schedule.type = t == "step" ? ScheduleSpec::Type::kStep
                        : t == "exponential" ? ScheduleSpec::Type::kExponential
                                             : ScheduleSpec::Type::kNone;
      u.schedule.decay_rate = r_.number(s, "decay_rate", sp, 0.5, 0.0, 1.0, true);
      u.schedule.step = r_.integer(s, "step", sp, 1000, 1, INT64_MAX);
      u.schedule.gamma = r_.number(s, "gamma", sp, 0.999, 0.0, 1.0, true);
    }
    return u;
  }

  DataSourceSpec parse_source(const YAML::Node& node, const std::string& p) {
    DataSourceSpec d;
    r_.expect_map(node, p, {"format", "images", "labels", "path", "label_column", "header",
                            "corrupt", "shards"});
    if (node["shards"] && node["path"])
      r_.fail(node["shards"], p + ".shards", "both path and shards are given",
              "keep path (every node reads the whole export) or shards (each node reads the "
              "files it holds)");
    d.format = r_.choice(node, "format", p, std::nullopt, {"idx", "csv", "images", "packed"});
    if (node["shards"] && d.format != "packed")
      r_.fail(node["shards"], p + ".shards", "shards are files of a packed export",
              "export the data (dtrain-submit export SPEC --out DIR), copy each node its files "
              "and write 'format: packed, shards: DIR/train-*.dtb'");
    if (d.format == "idx") {
      d.images = existing_file(node, "images", p);
      d.labels = existing_file(node, "labels", p);
    } else if (d.format == "packed" && node["shards"]) {
      // On the nodes, not here: the controller asks each which files it holds.
      d.shards = resolve(options_.base_dir, r_.text(node, "shards", p, std::nullopt));
      confine_pattern(node, "shards", p, d.shards);
    } else if (d.format == "packed") {
      d.path = resolve(options_.base_dir, r_.text(node, "path", p, std::nullopt));
      confine_pattern(node, "path", p, d.path);
      if (options_.check_files) {
        std::vector<std::string> files;
        try {
          files = packed_files(d.path);
        } catch (const UserError& e) {
          r_.fail(node["path"], p + ".path", e.what_happened(), e.fix());
        }
        confine(node, "path", p, files);  // a match may be a link
      }
    } else if (d.format == "images") {
      d.path = existing_folder(node, "path", p);
      d.skip_corrupt = r_.choice(node, "corrupt", p, std::string("fail"), {"fail", "skip"}) == "skip";
    } else {
      d.path = existing_file(node, "path", p);
      d.label_column = r_.integer(node, "label_column", p, -1, -1, 1 << 20);
      d.header = r_.boolean(node, "header", p, false);
      d.regression = r_.choice(node, "labels", p, std::string("classes"),
                               {"classes", "regression"}) == "regression";
    }
    d.roots = roots_for_reading();
    if ((d.format == "images" || d.format == "packed") && node["labels"])
      r_.fail(node["labels"], p + ".labels",
              "format " + d.format + " has class labels only (from the folders or the export)",
              "remove 'labels'; regression data is read from CSV (format: csv, labels: regression)");
    return d;
  }

  // The node's data_roots for the readers to check each file against as they open it (null
  // where nothing is confined); one copy for every source of the spec.
  std::shared_ptr<const DataRoots> roots_for_reading() {
    if (!roots_ && options_.check_files && options_.data_roots.confines())
      roots_ = std::make_shared<const DataRoots>(options_.data_roots);
    return roots_;
  }

  // A path outside the node's data_roots is refused before anything looks at it.
  void confine(const YAML::Node& map, const std::string& key, const std::string& p,
               const std::vector<std::string>& paths) {
    if (!options_.check_files) return;
    try {
      options_.data_roots.require(paths);
    } catch (const UserError& e) {
      r_.fail(map[key], p + "." + key, e.what_happened(), e.fix());
    }
  }
  void confine(const YAML::Node& map, const std::string& key, const std::string& p,
               const std::string& path) {
    confine(map, key, p, std::vector<std::string>{path});
  }

  // A file pattern (packed exports): wildcards only in its last part, its folder confined.
  void confine_pattern(const YAML::Node& map, const std::string& key, const std::string& p,
                       const std::string& pattern) {
    if (!options_.check_files || !options_.data_roots.confines()) return;
    std::string folder;
    try {
      folder = pattern_folder(pattern);
    } catch (const UserError& e) {
      r_.fail(map[key], p + "." + key, e.what_happened(), e.fix());
    }
    confine(map, key, p, folder);
  }

  std::string existing_folder(const YAML::Node& map, const std::string& key, const std::string& p) {
    const std::string path = resolve(options_.base_dir, r_.text(map, key, p, std::nullopt));
    if (!options_.check_files) return path;
    confine(map, key, p, path);
    struct stat st;
    if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || ::access(path.c_str(), R_OK | X_OK))
      r_.fail(map[key], p + "." + key, "cannot read folder '" + path + "'",
              "point it at a folder with one subfolder of images per class (relative paths are "
              "resolved against the spec's directory)");
    return path;
  }

  std::string existing_file(const YAML::Node& map, const std::string& key, const std::string& p) {
    const std::string path = resolve(options_.base_dir, r_.text(map, key, p, std::nullopt));
    if (!options_.check_files) return path;
    confine(map, key, p, path);
    struct stat st;
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || ::access(path.c_str(), R_OK))
      r_.fail(map[key], p + "." + key, "cannot read file '" + path + "'",
              path.find("fashion-mnist") != std::string::npos
                  ? "install Debian's dataset-fashion-mnist (tools/setup.sh does) or fix the path"
                  : "fix the path (relative paths are resolved against the spec's directory)");
    return path;
  }

  DataSpec parse_data(const YAML::Node& node) {
    DataSpec d;
    r_.expect_map(node, "data", {"train", "test", "normalize", "augment"});
    if (!node["train"])
      r_.fail(node, "data.train", "missing required setting",
              "add 'train: {format: idx, images: ..., labels: ...}'");
    d.train = parse_source(node["train"], "data.train");
    if (node["test"]) d.test = parse_source(node["test"], "data.test");
    if (!d.test.shards.empty())
      r_.fail(node["test"]["shards"], "data.test.shards",
              "the test set is read whole by the node that evaluates",
              "give data.test a path (every node evaluates its part of it)");
    if (d.test.regression && !d.train.regression)
      r_.fail(node["test"]["labels"], "data.test.labels",
              "data.test has regression labels, data.train class labels",
              "set 'labels: regression' on both");
    d.normalize = r_.choice(node, "normalize", "data", std::string("none"),
                            {"none", "scale", "standardize", "per_channel"});
    if (const YAML::Node a = node["augment"]) {
      r_.expect_map(a, "data.augment", {"crop_padding", "horizontal_flip"});
      d.augment.crop_padding = r_.integer(a, "crop_padding", "data.augment", 0, 0, 1 << 12);
      d.augment.horizontal_flip = r_.boolean(a, "horizontal_flip", "data.augment", false);
    }
    return d;
  }

  TrainingSpec parse_training(const YAML::Node& node) {
    TrainingSpec t;
    if (!node) return t;
    const std::string p = "training";
    r_.expect_map(node, p, {"mode", "epochs", "batch_size", "batch_size_per_worker", "nodes",
                            "workers_per_node", "cores_per_node", "gpus_per_node", "device",
                            "precision", "threshold", "residual", "mesh",
                            "averaging_frequency", "average_updater_state", "sync",
                            "corrections", "stop_on_divergence", "audit_updates",
                            "early_stopping", "allreduce"});
    t.mode = *parse_mode(r_.choice(node, "mode", p, std::string(mode_name(t.mode)),
                                   {"gradient_sharing", "parameter_averaging", "allreduce",
                                    "auto"}));
    t.epochs = r_.integer(node, "epochs", p, 1, 1, 100000);
    parse_batch(node, t);
    parse_nodes(node, t);
    t.workers_per_node = all_or_count(node, "workers_per_node", "auto", 256);
    if (t.mode == TrainingMode::kParameterAveraging && t.workers_per_node > 1)
      r_.fail(node["workers_per_node"], p + ".workers_per_node",
              "parameter_averaging runs one worker per node, but workers_per_node is " +
                  std::to_string(t.workers_per_node),
              "set training.workers_per_node: 1 (or auto), or use mode gradient_sharing");
    t.mesh = r_.choice(node, "mesh", p, t.mesh, {"plain", "mesh"});
    if (t.nodes_max > 0 && t.mesh == "mesh")
      r_.fail(node["mesh"], p + ".mesh",
              "an elastic job (nodes: {min, max}) runs on the plain mesh only",
              "remove 'mesh: mesh' (plain is the default), or give nodes a single count");
    t.device = *parse_device(r_.choice(node, "device", p, std::string(device_name(t.device)),
                                       {"auto", "cpu", "gpu"}));
    parse_node_share(node, t);
    t.precision = kernels::precision_of(
        r_.choice(node, "precision", p, std::string("fp32"), {"fp32", "bf16", "fp16"}));
    if (t.precision != kernels::Precision::kFp32 && t.device == Device::kCpu)
      r_.fail(node["precision"], p + ".precision",
              std::string("precision ") + kernels::precision_name(t.precision) +
                  " is mixed precision on GPUs, and the job trains on the CPU (device: cpu, or "
                  "cores_per_node without gpus_per_node; the CPU computes in fp32 only)",
              "set training.device: gpu (or auto; with cores_per_node, add gpus_per_node), or "
              "remove precision");
    t.averaging_frequency = r_.integer(node, "averaging_frequency", p, 5, 1, 1 << 20);
    t.average_updater_state = r_.boolean(node, "average_updater_state", p, false);
    t.stop_on_divergence = r_.boolean(node, "stop_on_divergence", p, true);
    t.audit_updates = r_.boolean(node, "audit_updates", p, false);
    t.sync = parse_sync(node, t.mode);
    check_mode_auto(node, t);
    check_local_steps(node, t);
    check_allreduce(node, t);
    t.allreduce = parse_allreduce(node["allreduce"], t.mode);
    t.early_stopping = parse_early_stopping(node["early_stopping"]);
    if (t.nodes_max > 0 && t.early_stopping.enabled)
      r_.fail(node["early_stopping"], p + ".early_stopping",
              "an elastic job (nodes: {min, max}) cannot stop early: a node that joins lacks "
              "the best model so far",
              "give nodes a single count, or remove early_stopping");
    if (const YAML::Node th = node["threshold"]) t.threshold = parse_threshold(th);
    if (const YAML::Node res = node["residual"]) t.residual = parse_residual(res);
    t.corrections = parse_corrections(node["corrections"], t.threshold.algorithm);
    return t;
  }

  // training.cores_per_node / gpus_per_node: a share of each node instead of whole nodes. GPUs
  // asked for make it a GPU job, cores alone a CPU job: `device` may not say otherwise.
  void parse_node_share(const YAML::Node& node, TrainingSpec& t) {
    const std::string p = "training";
    if (node["cores_per_node"]) t.cores_per_node = r_.integer(node, "cores_per_node", p, 0, 1, 4096);
    if (node["gpus_per_node"]) t.gpus_per_node = r_.integer(node, "gpus_per_node", p, 0, 1, 64);
    if (t.gpus_per_node > 0 && t.device == Device::kCpu)
      r_.fail(node["gpus_per_node"], p + ".gpus_per_node",
              "gpus_per_node asks for GPUs, but device is cpu",
              "remove gpus_per_node (cores_per_node alone shares a node's CPU), or set device: gpu");
    if (t.cores_per_node > 0 && t.gpus_per_node == 0 && t.device == Device::kGpu)
      r_.fail(node["cores_per_node"], p + ".cores_per_node",
              "a job that shares its nodes takes the GPUs it asks for, and device: gpu asks "
              "for none",
              "add training.gpus_per_node (e.g. 1), or remove cores_per_node to take whole nodes");
    if (t.gpus_per_node > 0) t.device = Device::kGpu;
    else if (t.cores_per_node > 0) t.device = Device::kCpu;
    const int64_t cores = t.cores_per_node > 0 ? t.cores_per_node : t.gpus_per_node;
    if (t.shares_nodes() && t.workers_per_node > cores)
      r_.fail(node["workers_per_node"], p + ".workers_per_node",
              "workers_per_node (" + std::to_string(t.workers_per_node) + ") is more than the " +
                  std::to_string(cores) + (cores == 1 ? " core" : " cores") +
                  " the job's share takes (cores_per_node, else " +
                  "one per GPU): each worker needs a core",
              "set workers_per_node to at most that, raise cores_per_node, or leave it auto");
  }

  // training.nodes: a count, all, or {min, max} (elastic).
  void parse_nodes(const YAML::Node& node, TrainingSpec& t) {
    if (!node["nodes"] || !node["nodes"].IsMap()) {
      t.nodes = all_or_count(node, "nodes", "all", 1 << 16);
      return;
    }
    const YAML::Node n = node["nodes"];
    const std::string np = "training.nodes";
    r_.expect_map(n, np, {"min", "max"});
    t.nodes = r_.integer(n, "min", np, std::nullopt, 1, 1 << 16);
    t.nodes_max = r_.integer(n, "max", np, std::nullopt, 1, 1 << 16);
    if (t.nodes_max < t.nodes)
      r_.fail(n, np, "max (" + std::to_string(t.nodes_max) + ") is smaller than min (" +
                         std::to_string(t.nodes) + ")",
              "make max at least min, e.g. nodes: {min: 3, max: 4}");
    if (t.nodes_max == t.nodes) t.nodes_max = 0;  // exactly that many
  }

  ThresholdSpec parse_threshold(const YAML::Node& th) {
    ThresholdSpec s;
    const std::string tp = "training.threshold";
    r_.expect_map(th, tp, {"algorithm", "initial", "min_sparsity", "max_sparsity",
                           "target_sparsity"});
    s.algorithm = r_.choice(th, "algorithm", tp, std::string("adaptive"),
                            {"adaptive", "target_sparsity", "fixed"});
    const double tau0 = s.algorithm == "target_sparsity" ? 1e-4 : 1e-3;
    s.initial = r_.number(th, "initial", tp, tau0, 0.0, 1e6, true);
    s.min_sparsity = r_.number(th, "min_sparsity", tp, 1e-4, 0.0, 1.0, true);
    s.max_sparsity = r_.number(th, "max_sparsity", tp, 1e-2, 0.0, 1.0, true);
    s.target_sparsity = r_.number(th, "target_sparsity", tp, 1e-3, 0.0, 1.0, true);
    if (s.min_sparsity > s.max_sparsity)
      r_.fail(th, tp, "min_sparsity is larger than max_sparsity",
              "make min_sparsity <= max_sparsity (defaults 1.0e-4 and 1.0e-2)");
    return s;
  }

  ResidualSpec parse_residual(const YAML::Node& res) {
    ResidualSpec s;
    if (res.IsScalar() && res.Scalar() == "none") {
      s.clip = false;
      return s;
    }
    const std::string rp = "training.residual";
    r_.expect_map(res, rp, {"clip_multiple", "every"});
    s.clip_multiple = r_.number(res, "clip_multiple", rp, 5.0, 1.0, 1e6, false);
    s.every = r_.integer(res, "every", rp, 5, 1, 1 << 20);
    return s;
  }

  EarlyStoppingSpec parse_early_stopping(const YAML::Node& node) {
    EarlyStoppingSpec e;
    if (!node) return e;
    const std::string p = "training.early_stopping";
    r_.expect_map(node, p, {"metric", "patience", "min_delta"});
    e.enabled = true;
    e.metric = r_.choice(node, "metric", p, e.metric, {"accuracy", "loss"});
    e.patience = r_.integer(node, "patience", p, 3, 1, 100000);
    e.min_delta = r_.number(node, "min_delta", p, 0.0, 0.0, 1e6, false);
    return e;
  }

  // `batch_size: B` (the job's, split over its workers; the default, 32) or
  // `batch_size_per_worker: b` (each worker's), never both (core/train/batch_split.h).
  void parse_batch(const YAML::Node& node, TrainingSpec& t) {
    const std::string p = "training";
    if (node["batch_size"] && node["batch_size_per_worker"])
      r_.fail(node["batch_size_per_worker"], p + ".batch_size_per_worker",
              "batch_size and batch_size_per_worker are both set",
              "keep batch_size (the job's batch, split over its workers: accuracy does not "
              "depend on the number of workers) or batch_size_per_worker (each worker's: a "
              "step grows with the workers), not both");
    if (node["batch_size_per_worker"]) {
      t.batch_size = 0;
      t.batch_size_per_worker = r_.integer(node, "batch_size_per_worker", p, 32, 1, 1 << 20);
    } else {
      t.batch_size = r_.integer(node, "batch_size", p, 32, 1, 1 << 20);
      t.batch_size_per_worker = 0;
    }
  }

  // `sync: async | bsp | auto | {bounded: K} | {local: ...}` (docs/architecture/core.md,
  // "Staleness and corrections"; docs/user-guide.md, "Choosing how workers synchronise").
  // Without `sync`, gradient sharing chooses from the link (auto); averaging is bsp.
  SyncSpec parse_sync(const YAML::Node& training, TrainingMode mode) {
    SyncSpec s;
    const YAML::Node v = training["sync"];
    if (!v) {
      if (mode == TrainingMode::kGradientSharing || mode == TrainingMode::kAuto) s.mode = "auto";
      return s;
    }
    const std::string fix =
        "write 'sync: auto', 'sync: async', 'sync: bsp', 'sync: {bounded: 2}' or "
        "'sync: {local: {steps: 50}}'";
    if (v.IsMap()) {
      r_.expect_map(v, "training.sync", {"bounded", "local"});
      if (v["bounded"] && v["local"])
        r_.fail(v, "training.sync", "bounded and local are two different ways to synchronise",
                "keep one of them");
      if (v["local"]) return parse_local_steps(v["local"]);
      s.mode = "bounded";
      s.bound = r_.integer(v, "bounded", "training.sync", std::nullopt, 1, 1 << 20);
      return s;
    }
    if (v.IsScalar() && v.Scalar() == "bounded")
      r_.fail(v, "training.sync", "bounded needs its number of steps", fix);
    s.mode = r_.choice(training, "sync", "training", std::nullopt, {"async", "bsp", "auto"});
    s.bound = s.mode == "async" ? 0 : 1;
    return s;
  }

  AllreduceSpec parse_allreduce(const YAML::Node& node, TrainingMode mode) {
    AllreduceSpec a;
    if (!node) return a;
    const std::string p = "training.allreduce";
    if (mode != TrainingMode::kAllreduce && mode != TrainingMode::kAuto)
      r_.fail(node, p,
              std::string("training.allreduce sets up mode allreduce, and the mode is ") +
                  mode_name(mode),
              "remove training.allreduce, or set training.mode: allreduce (or auto)");
    r_.expect_map(node, p, {"bucket_mb"});
    a.bucket_mb = r_.number(node, "bucket_mb", p, a.bucket_mb, 0.0, 4096.0, false);
    return a;
  }

  // Dense all-reduce is synchronous by construction: every worker takes every step together.
  void check_allreduce(const YAML::Node& node, const TrainingSpec& t) {
    if (t.mode != TrainingMode::kAllreduce) return;
    if (node["sync"] && t.sync.mode != "bsp")
      r_.fail(node["sync"], "training.sync",
              "mode allreduce sums every step's gradients over all workers before any of them "
              "steps, so it is always bsp",
              "remove training.sync (or write 'sync: bsp')");
    if (t.precision == kernels::Precision::kFp16)
      r_.fail(node["precision"], "training.precision",
              "mode allreduce sums the gradients of workers whose fp16 loss scales could differ, "
              "and this release has no shared loss scale",
              "use training.precision: bf16 (fp32's range, no loss scaling), or fp32");
  }

  // `mode: auto` chooses the sync with the mode: allreduce is always bsp, and gradient sharing
  // takes `sync: auto`'s choice (core/train/sync_choice.h).
  void check_mode_auto(const YAML::Node& node, const TrainingSpec& t) {
    if (t.mode != TrainingMode::kAuto || t.sync.mode == "auto") return;
    r_.fail(node["sync"], "training.sync",
            "mode auto chooses the sync along with the mode (allreduce always steps together; "
            "gradient sharing takes sync auto's choice)",
            "remove training.sync (or write 'sync: auto'), or set training.mode: "
            "gradient_sharing or allreduce and keep this sync");
  }

  // Local steps share a pseudo-gradient: a sharing mode's (and auto may choose them).
  void check_local_steps(const YAML::Node& node, const TrainingSpec& t) {
    if (t.sync.mode != "local" && t.sync.mode != "auto") return;
    if (t.mode != TrainingMode::kGradientSharing && t.mode != TrainingMode::kAuto)
      r_.fail(node["sync"], "training.sync",
              (t.sync.mode == "auto" ? "auto chooses between per-step sharing and local steps"
                                     : "local steps share a threshold-encoded pseudo-gradient") +
                  std::string(", and mode is ") + mode_name(t.mode),
              "remove training.mode (gradient_sharing is the default)");
  }

  // `local: {steps: H, outer: {type, learning_rate, momentum}, density}`.
  SyncSpec parse_local_steps(const YAML::Node& v) {
    const std::string p = "training.sync.local";
    SyncSpec s;
    s.mode = "local";
    s.bound = 0;
    LocalStepsSpec& l = s.local;
    if (v.IsNull()) return s;  // `local:` alone takes every default
    r_.expect_map(v, p, {"steps", "outer", "density", "levels", "overlap"});
    l.overlap = r_.boolean(v, "overlap", p, l.overlap);
    l.steps = r_.integer(v, "steps", p, l.steps, 1, 1 << 20);
    l.levels = r_.integer(v, "levels", p, l.levels, 1, kMaxPseudoGradientLevels);
    l.density = r_.number(v, "density", p, l.density, 0.0, 1.0, /*min_exclusive=*/true);
    const YAML::Node o = v["outer"];
    if (!o) return s;
    const std::string po = p + ".outer";
    r_.expect_map(o, po, {"type", "learning_rate", "momentum"});
    l.outer.type = r_.choice(o, "type", po, l.outer.type, {"nesterov", "sgd"});
    l.outer.learning_rate =
        r_.number(o, "learning_rate", po, l.outer.learning_rate, 0.0, 100.0, /*min_exclusive=*/true);
    l.outer.momentum = r_.number(o, "momentum", po, l.outer.momentum, 0.0, 0.999, false);
    if (l.outer.type == "sgd") l.outer.momentum = 0.0;
    return s;
  }

  CorrectionsSpec parse_corrections(const YAML::Node& node, const std::string& threshold) {
    CorrectionsSpec c;
    if (!node) return c;
    const std::string p = "training.corrections";
    r_.expect_map(node, p, {"momentum_masking", "clip_norm", "sparsity_warmup", "lr_scaling"});
    c.momentum_masking = r_.boolean(node, "momentum_masking", p, c.momentum_masking);
    c.clip_norm = r_.number(node, "clip_norm", p, c.clip_norm, 0.0, 1e9, false);
    const YAML::Node warm = node["sparsity_warmup"];
    if (warm) {
      const std::string wp = p + ".sparsity_warmup";
      r_.expect_map(warm, wp, {"epochs", "start_density"});
      c.sparsity_warmup_epochs =
          r_.number(warm, "epochs", wp, c.sparsity_warmup_epochs, 0.0, 1000.0, false);
      c.sparsity_warmup_start =
          r_.number(warm, "start_density", wp, 1.0 / 16.0, 0.0, 1.0 / 16.0, true);
      if (c.sparsity_warmup_epochs > 0 && threshold == "fixed")
        r_.fail(warm, wp, "a fixed threshold cannot follow a density warm-up",
                "use threshold algorithm adaptive or target_sparsity, or drop sparsity_warmup");
    }
    const YAML::Node lr = node["lr_scaling"];
    if (lr) {
      const std::string lp = p + ".lr_scaling";
      r_.expect_map(lr, lp, {"rule", "warmup_epochs"});
      c.lr_scaling = r_.choice(lr, "rule", lp, c.lr_scaling, {"linear", "sqrt", "none"});
      c.lr_warmup_epochs = r_.number(lr, "warmup_epochs", lp, c.lr_warmup_epochs, 0.0, 1000.0, false);
    }
    return c;
  }

  // `key: all|auto` -> 0, or a positive count.
  int64_t all_or_count(const YAML::Node& node, const std::string& key, const std::string& word,
                       int64_t max) {
    const YAML::Node v = node[key];
    if (!v || (v.IsScalar() && v.Scalar() == word)) return 0;
    if (v.IsScalar() && !v.Scalar().empty() && std::isalpha(static_cast<unsigned char>(
                                                   v.Scalar()[0])))
      r_.fail(v, "training." + key, "expected '" + word + "' or a positive integer, got '" +
                                        v.Scalar() + "'",
              "write '" + key + ": " + word + "' or a count such as 2");
    return r_.integer(node, key, "training", std::nullopt, 1, max);
  }

  EvaluationSpec parse_evaluation(const YAML::Node& node, const ModelSpec& model) {
    EvaluationSpec e;
    if (!node) return e;
    r_.expect_map(node, "evaluation", {"top_n"});
    e.top_n = r_.integer(node, "top_n", "evaluation", 1, 1, model.layers.back().units);
    return e;
  }

  OutputSpec parse_output(const YAML::Node& node, const std::string& name) {
    OutputSpec o;
    o.model = name + ".dtm";
    if (!node) return o;
    r_.expect_map(node, "output", {"model", "checkpoint_every", "keep_checkpoints"});
    o.model = r_.text(node, "model", "output", o.model);
    o.checkpoint_every = r_.integer(node, "checkpoint_every", "output", 0, 0, INT64_MAX);
    o.keep_checkpoints = r_.integer(node, "keep_checkpoints", "output", 2, 1, 1000);
    return o;
  }

  SpecReader r_;
  SpecParseOptions options_;
  std::shared_ptr<const DataRoots> roots_;  // roots_for_reading()
};

}  // namespace

SpecParseOptions stored_spec_options(const std::string& base_dir) {
  SpecParseOptions options;
  options.check_files = false;
  options.base_dir = base_dir;
  options.refuse_repeated_keys = false;
  return options;
}

JobSpec parse_job_spec_text(const std::string& text, const std::string& source_name,
                            const SpecParseOptions& options) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw SpecError(source_name + ":" + std::to_string(e.mark.line + 1) + ":" +
                        std::to_string(e.mark.column + 1),
                    "malformed YAML: " + e.msg,
                    "check the indentation and that each 'key: value' has a space after ':'");
  }
  if (!root.IsMap())
    throw SpecError(source_name, "the job spec must be a YAML map (name:, model:, data:, ...)",
                    "see configs/fashion-mnist-mlp.yaml for a complete example");
  JobSpec job = JobSpecParser(source_name, options).parse(root);
  job.source_text = text;
  job.source_name = source_name;
  return job;
}

JobSpec parse_job_spec_file(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw UserError("cannot read job spec '" + path + "'",
                    "check the path; example specs are in configs/");
  std::stringstream buffer;
  buffer << in.rdbuf();
  SpecParseOptions options;
  auto slash = path.rfind('/');
  options.base_dir = slash == std::string::npos ? "." : path.substr(0, slash);
  return parse_job_spec_text(buffer.str(), path, options);
}

}  // namespace dtrain::core
