// Job spec parsing: the shipped examples parse; bad specs are refused with the file, line,
// column, the key and a fix.
#include <catch2/catch.hpp>

#include <regex>

#include "core/spec/cluster_rules.h"
#include "core/spec/job_spec_parser.h"
#include "tests/test_util.h"

namespace dtrain {
namespace {

struct Fixture {
  std::string dir = testing::temp_dir();
  Fixture() { testing::write_text(dir + "/train.csv", "1,2,0\n3,4,1\n"); }

  // Parses `text` from a file in the fixture directory; returns the error message or "".
  std::string error_of(const std::string& text) {
    testing::write_text(dir + "/job.yaml", text);
    try {
      core::parse_job_spec_file(dir + "/job.yaml");
      return "";
    } catch (const core::UserError& e) {
      return e.what();
    }
  }
};

const std::string kGood =
    "name: ok\n"
    "model:\n"
    "  input: [2]\n"
    "  layers:\n"
    "    - dense: {units: 4, activation: relu}\n"
    "    - output: {units: 2, activation: softmax, loss: mcxent}\n"
    "data:\n"
    "  train: {format: csv, path: train.csv}\n"
    "training:\n"
    "  epochs: 2\n"
    "  batch_size_per_worker: 8\n";

std::string replace(std::string s, const std::string& from, const std::string& to) {
  auto pos = s.find(from);
  REQUIRE(pos != std::string::npos);
  return s.replace(pos, from.size(), to);
}

}  // namespace

TEST_CASE("the shipped example specs parse with their documented values") {
  core::JobSpec job = core::parse_job_spec_file("configs/fashion-mnist-mlp.yaml");
  CHECK(job.name == "fashion-mnist-mlp");
  CHECK(job.model.input == core::Shape{784});
  REQUIRE(job.model.layers.size() == 3);
  CHECK(job.model.layers[0].units == 256);
  CHECK(job.model.updater.type == "nesterovs");
  CHECK(job.model.updater.learning_rate == Approx(0.05));
  CHECK(job.model.l2 == Approx(1e-4));
  CHECK(job.training.batch_size == 64);
  CHECK(job.training.batch_size_per_worker == 0);
  CHECK(job.training.workers_per_node == 0);  // auto
  CHECK(job.training.threshold.algorithm == "adaptive");
  CHECK(job.training.residual.clip_multiple == 5);
  CHECK(job.evaluation.top_n == 5);
  CHECK(job.output.checkpoint_every == 1000);
  core::JobSpec cnn = core::parse_job_spec_file("configs/fashion-mnist-lenet.yaml");
  CHECK(cnn.model.input == core::Shape{1, 28, 28});
  CHECK(cnn.model.layers[0].kind == core::LayerSpec::Kind::kConvolution);
}

TEST_CASE("a good spec parses and relative data paths resolve against the spec's folder") {
  Fixture f;
  CHECK(f.error_of(kGood) == "");
  CHECK(f.error_of(replace(kGood, "epochs: 2", "epochs: 2\n  average_updater_state: true")) == "");
  core::JobSpec job = core::parse_job_spec_file(f.dir + "/job.yaml");
  CHECK(job.data.train.path == f.dir + "/train.csv");
  CHECK(job.output.model == "ok.dtm");
}

TEST_CASE("the batch is the job's, split over its workers, unless batch_size_per_worker says") {
  Fixture f;
  const std::string no_batch = replace(kGood, "  batch_size_per_worker: 8\n", "");
  REQUIRE(f.error_of(no_batch) == "");
  core::JobSpec job = core::parse_job_spec_file(f.dir + "/job.yaml");
  CHECK(job.training.batch_size == 32);
  CHECK(job.training.batch_size_per_worker == 0);
  REQUIRE(f.error_of(replace(kGood, "batch_size_per_worker: 8", "batch_size: 96")) == "");
  job = core::parse_job_spec_file(f.dir + "/job.yaml");
  CHECK(job.training.batch_size == 96);
  CHECK(job.training.batch_size_per_worker == 0);
  REQUIRE(f.error_of(kGood) == "");
  job = core::parse_job_spec_file(f.dir + "/job.yaml");
  CHECK(job.training.batch_size == 0);
  CHECK(job.training.batch_size_per_worker == 8);
}

TEST_CASE("cores_per_node and gpus_per_node ask for a share of each node, and say the device") {
  Fixture f;
  testing::write_text(f.dir + "/job.yaml", kGood + "  cores_per_node: 3\n");
  const core::TrainingSpec cpu = core::parse_job_spec_file(f.dir + "/job.yaml").training;
  CHECK(cpu.shares_nodes());
  CHECK(cpu.cores_per_node == 3);
  CHECK(cpu.device == core::Device::kCpu);
  testing::write_text(f.dir + "/job.yaml", kGood + "  gpus_per_node: 2\n");
  const core::TrainingSpec gpu = core::parse_job_spec_file(f.dir + "/job.yaml").training;
  CHECK(gpu.gpus_per_node == 2);
  CHECK(gpu.device == core::Device::kGpu);
  testing::write_text(f.dir + "/job.yaml", kGood);
  CHECK_FALSE(core::parse_job_spec_file(f.dir + "/job.yaml").training.shares_nodes());
}

TEST_CASE("bad specs are refused with location, key and fix") {
  Fixture f;
  struct Case {
    const char* what;
    std::string text;
    std::vector<std::string> expected;  // substrings of the message
  };
  const std::vector<Case> cases = {
      {"wrong type", replace(kGood, "epochs: 2", "epochs: two"),
       {"job.yaml:10:11", "training.epochs", "expected an integer", "'two'"}},
      {"negative size", replace(kGood, "batch_size_per_worker: 8", "batch_size_per_worker: -8"),
       {"job.yaml:11:26", "training.batch_size_per_worker", "out of range"}},
      {"both batch keys", replace(kGood, "epochs: 2", "epochs: 2\n  batch_size: 64"),
       {"job.yaml:12:", "training.batch_size_per_worker", "both set", "not both"}},
      {"zero batch", replace(kGood, "batch_size_per_worker: 8", "batch_size: 0"),
       {"training.batch_size", "out of range"}},
      {"not a boolean", replace(kGood, "epochs: 2", "epochs: 2\n  average_updater_state: maybe"),
       {"job.yaml:11:", "training.average_updater_state", "'maybe'"}},
      {"a key set twice", kGood + "  sync: async\n  sync: bsp\n",
       {"job.yaml:13:3", "training: 'sync' is set twice (also at line 12)", "keep one 'sync:'"}},
      {"allreduce with a sync other than bsp", kGood + "  mode: allreduce\n  sync: async\n",
       {"training.sync", "mode allreduce sums every step's gradients", "always bsp",
        "remove training.sync"}},
      {"auto with a sync of its own", kGood + "  mode: auto\n  sync: {local: {steps: 8}}\n",
       {"training.sync", "mode auto chooses the sync along with the mode",
        "remove training.sync (or write 'sync: auto')"}},
      {"allreduce in fp16", kGood + "  mode: allreduce\n  device: gpu\n  precision: fp16\n",
       {"training.precision", "no shared loss scale", "use training.precision: bf16"}},
      {"a section set twice", kGood + "training:\n  epochs: 3\n",
       {"'training' is set twice (also at line 9)"}},
      {"GPUs asked for on the CPU", kGood + "  device: cpu\n  gpus_per_node: 1\n",
       {"training.gpus_per_node", "asks for GPUs, but device is cpu", "set device: gpu"}},
      {"a GPU job's share without GPUs", kGood + "  device: gpu\n  cores_per_node: 2\n",
       {"training.cores_per_node", "device: gpu asks for none", "add training.gpus_per_node"}},
      {"more workers than cores", kGood + "  cores_per_node: 2\n  workers_per_node: 4\n",
       {"training.workers_per_node", "is more than the 2 cores the job's share takes",
        "set workers_per_node to at most that"}},
      {"more workers than GPUs' cores", kGood + "  gpus_per_node: 1\n  workers_per_node: 3\n",
       {"training.workers_per_node", "is more than the 1 core the job's share takes"}},
      {"mixed precision on a share of cores", kGood + "  cores_per_node: 2\n  precision: bf16\n",
       {"training.precision", "cores_per_node without gpus_per_node", "add gpus_per_node"}},
      {"no cores", kGood + "  cores_per_node: 0\n", {"training.cores_per_node", "out of range"}},
      {"unknown key with suggestion", replace(kGood, "epochs: 2", "epoch: 2"),
       {"job.yaml:10:3", "unknown key 'epoch'", "did you mean 'epochs'"}},
      {"missing file", replace(kGood, "path: train.csv", "path: nowhere.csv"),
       {"job.yaml:8:", "data.train.path", "cannot read file", "nowhere.csv"}},
      {"malformed YAML", replace(kGood, "  input: [2]", "  input: [2"),
       {"job.yaml:", "malformed YAML", "indentation"}},
      {"unknown layer type", replace(kGood, "- dense:", "- densse:"),
       {"job.yaml:5:", "unknown layer type 'densse'", "did you mean 'dense'"}},
      {"unknown activation", replace(kGood, "activation: relu", "activation: rellu"),
       {"model.layers[0].dense.activation", "did you mean 'relu'"}},
      {"output not last",
       replace(kGood, "    - output: {units: 2, activation: softmax, loss: mcxent}\n", "") +
           "",
       {"model.layers[0]", "last layer must be an output layer"}},
      {"loss/activation mismatch", replace(kGood, "loss: mcxent", "loss: xent"),
       {"model.layers[1].output", "xent needs activation sigmoid"}},
      {"missing units", replace(kGood, "{units: 4, activation: relu}", "{activation: relu}"),
       {"model.layers[0].dense.units", "missing required setting", "add 'units:"}},
      {"convolution on flat input",
       replace(kGood, "- dense: {units: 4, activation: relu}", "- convolution: {filters: 2}"),
       {"model.layers[0]", "needs [channels, height, width] input", "model.input"}},
      {"kernel larger than image",
       replace(replace(kGood, "input: [2]", "input: [1, 4, 4]"),
               "- dense: {units: 4, activation: relu}", "- convolution: {filters: 2, kernel: 5}"),
       {"model.layers[0]", "does not fit input"}},
      {"averaging with several workers",
       replace(kGood, "training:\n", "training:\n  mode: parameter_averaging\n  workers_per_node: 2\n"),
       {"training.workers_per_node", "one worker per node", "workers_per_node is 2",
        "fix: set training.workers_per_node: 1"}},
      {"bad enum value", replace(kGood, "training:\n", "training:\n  mode: async\n"),
       {"training.mode", "unknown value 'async'", "gradient_sharing"}},
      {"sparsity bounds reversed",
       kGood + "  threshold: {min_sparsity: 0.1, max_sparsity: 0.01}\n",
       {"training.threshold", "min_sparsity is larger than max_sparsity"}},
      {"not a map", "just a string\n", {"must be a YAML map"}},
      {"unknown sync mode", kGood + "  sync: ssp\n",
       {"training.sync", "unknown value 'ssp'", "async, bsp, auto"}},
      {"bounded without a number", kGood + "  sync: bounded\n",
       {"training.sync", "bounded needs its number of steps", "{bounded: 2}"}},
      {"bounded zero", kGood + "  sync: {bounded: 0}\n", {"training.sync.bounded", "out of range"}},
      {"local steps with averaging",
       replace(kGood, "training:\n", "training:\n  mode: parameter_averaging\n") +
           "  sync: {local: {steps: 10}}\n",
       {"training.sync", "pseudo-gradient", "remove training.mode"}},
      {"auto with averaging",
       replace(kGood, "training:\n", "training:\n  mode: parameter_averaging\n") +
           "  sync: auto\n",
       {"training.sync", "auto chooses between per-step sharing and local steps",
        "remove training.mode"}},
      {"local steps: unknown outer optimizer", kGood + "  sync: {local: {outer: {type: adam}}}\n",
       {"training.sync.local.outer.type", "'adam'", "nesterov, sgd"}},
      {"local steps: density zero", kGood + "  sync: {local: {density: 0}}\n",
       {"training.sync.local.density", "out of range"}},
      {"local steps: too many levels", kGood + "  sync: {local: {levels: 9}}\n",
       {"training.sync.local.levels", "out of range"}},
      {"local and bounded", kGood + "  sync: {local: {steps: 5}, bounded: 2}\n",
       {"training.sync", "keep one of them"}},
      {"unknown correction", kGood + "  corrections: {momentum_mask: true}\n",
       {"training.corrections", "unknown key 'momentum_mask'", "did you mean 'momentum_masking'"}},
      {"unknown lr scaling rule", kGood + "  corrections: {lr_scaling: {rule: square}}\n",
       {"training.corrections.lr_scaling.rule", "'square'", "linear, sqrt, none"}},
      {"warm-up density above a bitmap's",
       kGood + "  corrections: {sparsity_warmup: {epochs: 1, start_density: 0.5}}\n",
       {"training.corrections.sparsity_warmup.start_density", "out of range"}},
      {"warm-up with a fixed threshold",
       kGood + "  threshold: {algorithm: fixed}\n  corrections: {sparsity_warmup: {epochs: 1}}\n",
       {"training.corrections.sparsity_warmup", "fixed threshold", "adaptive"}},
      {"bad name", replace(kGood, "name: ok", "name: a/b"), {"name", "contains '/'"}},
      {"an image folder that is a file",
       replace(kGood, "train: {format: csv, path: train.csv}", "train: {format: images, path: train.csv}"),
       {"data.train.path", "cannot read folder", "one subfolder of images per class"}},
      {"an unknown corrupt policy",
       replace(kGood, "train: {format: csv, path: train.csv}", "train: {format: images, path: ., corrupt: ignore}"),
       {"data.train.corrupt", "'ignore'", "fail, skip"}},
      {"regression labels with a classifier's loss",
       replace(kGood, "path: train.csv}", "path: train.csv, labels: regression}"),
       {"data.train.labels", "loss mse, it has mcxent", "activation: identity, loss: mse"}},
      {"regression labels on an image folder",
       replace(kGood, "train: {format: csv, path: train.csv}",
               "train: {format: images, path: ., labels: regression}"),
       {"data.train.labels", "class labels only", "format: csv, labels: regression"}},
      {"regression training, class test labels",
       replace(replace(kGood, "softmax, loss: mcxent", "identity, loss: mse"),
               "path: train.csv}", "path: train.csv, labels: regression}\n"
                                   "  test: {format: csv, path: train.csv, labels: classes}"),
       {"data.test.labels", "data.train has regression labels", "on both"}},
      {"class training, regression test labels",
       replace(kGood, "path: train.csv}", "path: train.csv}\n"
                                          "  test: {format: csv, path: train.csv, labels: regression}"),
       {"data.test.labels", "data.train class labels"}},
      {"a regression model's accuracy",
       replace(replace(kGood, "softmax, loss: mcxent", "identity, loss: mse"),
               "path: train.csv}", "path: train.csv, labels: regression}") +
           "  early_stopping: {metric: accuracy}\n",
       {"training.early_stopping.metric", "no accuracy", "metric: loss"}},
      {"unknown label kind", replace(kGood, "path: train.csv}", "path: train.csv, labels: values}"),
       {"data.train.labels", "'values'", "classes, regression"}},
      {"learning rate zero", kGood.substr(0, kGood.find("data:")) +
                                 "  updater: {type: adam, learning_rate: 0}\n" +
                                 kGood.substr(kGood.find("data:")),
       {"model.updater.learning_rate", "out of range", "> 0"}},
  };
  REQUIRE(cases.size() >= 10);
  for (const auto& c : cases) {
    INFO(c.what);
    const std::string message = f.error_of(c.text);
    INFO(message);
    REQUIRE_FALSE(message.empty());
    for (const auto& part : c.expected) CHECK_THAT(message, Catch::Contains(part));
  }
}

TEST_CASE("a spec stored before repeated keys were refused reads as before: the first counts") {
  Fixture f;
  const std::string twice = kGood + "  sync: async\n  sync: bsp\n";
  REQUIRE_FALSE(f.error_of(twice).empty());  // a user's file: refused
  const core::JobSpec job =
      core::parse_job_spec_text(twice, "model.dtm (embedded spec)", core::stored_spec_options());
  CHECK(job.training.sync.mode == "async");
}

TEST_CASE("labels: regression: the test set follows, early stopping watches the loss") {
  Fixture f;
  const std::string text =
      replace(replace(kGood, "softmax, loss: mcxent", "identity, loss: mse"),
              "path: train.csv}", "path: train.csv, labels: regression}\n"
                                  "  test: {format: csv, path: train.csv}") +
      "  early_stopping: {patience: 2}\n";
  testing::write_text(f.dir + "/job.yaml", text);
  const core::JobSpec job = core::parse_job_spec_file(f.dir + "/job.yaml");
  CHECK(job.regression());
  CHECK(job.data.test.regression);
  CHECK(job.training.early_stopping.metric == "loss");
  testing::write_text(f.dir + "/job.yaml", kGood);
  CHECK_FALSE(core::parse_job_spec_file(f.dir + "/job.yaml").regression());
}

TEST_CASE("data.train.shards: node-local packed files, not checked where the spec is read") {
  Fixture f;
  const std::string shards = replace(kGood, "train: {format: csv, path: train.csv}",
                                     "train: {format: packed, shards: \"/data/{node}/t-*.dtb\"}");
  testing::write_text(f.dir + "/job.yaml", shards);
  const core::JobSpec job = core::parse_job_spec_file(f.dir + "/job.yaml");
  CHECK(job.data.train.shards == "/data/{node}/t-*.dtb");  // no file here: the nodes hold them
  CHECK(job.data.train.path.empty());
  // mode auto takes them: it chooses gradient sharing every step for node-local shards.
  testing::write_text(f.dir + "/auto.yaml",
                      replace(shards, "epochs: 2", "epochs: 2\n  mode: auto"));
  CHECK(core::mode_is_auto(core::parse_job_spec_file(f.dir + "/auto.yaml").training));
  // And allreduce: a lost node's minibatches are skipped, as gradient sharing skips them.
  testing::write_text(f.dir + "/ar.yaml",
                      replace(shards, "epochs: 2", "epochs: 2\n  mode: allreduce"));
  CHECK(core::reduces_every_step(core::parse_job_spec_file(f.dir + "/ar.yaml").training));
  const std::string packed = "train: {format: packed, shards: \"/data/{node}/t-*.dtb\"}";
  struct Case {
    std::string text, expected;
  };
  for (const Case& c : std::vector<Case>{
           {replace(shards, "shards:", "path: x, shards:"), "both path and shards are given"},
           {replace(shards, "format: packed", "format: csv"), "shards are files of a packed export"},
           {replace(shards, "epochs: 2", "epochs: 2\n  mode: parameter_averaging"),
            "node-local shards train with gradient sharing every step or allreduce only"},
           {replace(shards, "epochs: 2", "epochs: 2\n  sync: {local: {steps: 10}}"),
            "node-local shards train with gradient sharing every step or allreduce only"},
           {replace(shards, "epochs: 2", "epochs: 2\n  nodes: {min: 2, max: 3}"),
            "an elastic job (training.nodes: {min, max}) cannot use node-local shards"},
           {replace(shards, packed, packed + "\n  test: {format: packed, shards: \"/d/*.dtb\"}"),
            "data.test.shards"}}) {
    const std::string message = f.error_of(c.text);
    INFO(message);
    CHECK_THAT(message, Catch::Contains(c.expected));
  }
}

TEST_CASE("sync and the corrections parse, with their defaults") {
  Fixture f;
  testing::write_text(f.dir + "/job.yaml", kGood);
  const core::TrainingSpec d = core::parse_job_spec_file(f.dir + "/job.yaml").training;
  CHECK(d.sync.mode == "auto");  // gradient sharing without sync: chosen from the link
  CHECK(d.sync.bound == 1);
  testing::write_text(f.dir + "/avg.yaml",
                      replace(kGood, "training:\n", "training:\n  mode: parameter_averaging\n"));
  CHECK(core::parse_job_spec_file(f.dir + "/avg.yaml").training.sync.mode == "bsp");
  testing::write_text(f.dir + "/ar.yaml",
                      replace(kGood, "training:\n",
                              "training:\n  mode: allreduce\n  workers_per_node: 3\n  sync: bsp\n"));
  const core::TrainingSpec ar = core::parse_job_spec_file(f.dir + "/ar.yaml").training;
  CHECK(ar.mode == core::TrainingMode::kAllreduce);
  CHECK(core::reduces_every_step(ar));
  CHECK_FALSE(core::shares_every_step(ar));
  CHECK(ar.sync.mode == "bsp");
  CHECK(ar.workers_per_node == 3);  // several workers a node, unlike parameter averaging
  CHECK(std::string(core::mode_name(ar.mode)) == "allreduce");
  testing::write_text(f.dir + "/auto.yaml",
                      replace(kGood, "training:\n", "training:\n  mode: auto\n"));
  const core::TrainingSpec au = core::parse_job_spec_file(f.dir + "/auto.yaml").training;
  CHECK(core::mode_is_auto(au));  // chosen on the cluster, with the sync
  CHECK(au.sync.mode == "auto");
  CHECK_FALSE(core::reduces_every_step(au));
  CHECK(std::string(core::mode_name(au.mode)) == "auto");
  CHECK(d.stop_on_divergence);
  CHECK_FALSE(d.audit_updates);
  CHECK(d.corrections.momentum_masking);  // DGC's set is on by default
  CHECK(d.corrections.clip_norm == 5.0);
  CHECK(d.corrections.sparsity_warmup_epochs == 1.0);
  CHECK(d.corrections.lr_warmup_epochs == 1.0);
  CHECK(d.corrections.lr_scaling == "linear");
  testing::write_text(f.dir + "/job.yaml",
                      kGood + "  sync: {bounded: 3}\n  audit_updates: true\n"
                              "  corrections:\n    momentum_masking: false\n    clip_norm: 2.5\n"
                              "    sparsity_warmup: {epochs: 2, start_density: 0.05}\n"
                              "    lr_scaling: {rule: sqrt, warmup_epochs: 1.5}\n");
  const core::TrainingSpec t = core::parse_job_spec_file(f.dir + "/job.yaml").training;
  CHECK(t.sync.mode == "bounded");
  CHECK(t.sync.bound == 3);
  CHECK(t.audit_updates);
  CHECK_FALSE(t.corrections.momentum_masking);
  CHECK(t.corrections.clip_norm == 2.5);
  CHECK(t.corrections.sparsity_warmup_epochs == 2.0);
  CHECK(t.corrections.sparsity_warmup_start == 0.05);
  CHECK(t.corrections.lr_scaling == "sqrt");
  CHECK(t.corrections.lr_warmup_epochs == 1.5);
  testing::write_text(f.dir + "/job.yaml",
                      kGood + "  sync: {local: {steps: 30, density: 0.05, levels: 2, overlap: true, "
                              "outer: {learning_rate: 0.5, momentum: 0.8}}}\n");
  const core::TrainingSpec l = core::parse_job_spec_file(f.dir + "/job.yaml").training;
  CHECK(core::steps_locally(l));
  CHECK_FALSE(core::shares_every_step(l));
  CHECK(l.sync.local.steps == 30);
  CHECK(l.sync.local.density == 0.05);
  CHECK(l.sync.local.outer.type == "nesterov");
  CHECK(l.sync.local.outer.learning_rate == 0.5);
  CHECK(l.sync.local.outer.momentum == 0.8);
  CHECK(l.sync.local.levels == 2);
  CHECK(l.sync.local.overlap);
  testing::write_text(f.dir + "/job.yaml", kGood + "  sync: async\n");
  CHECK(core::parse_job_spec_file(f.dir + "/job.yaml").training.sync.bound == 0);
  testing::write_text(f.dir + "/job.yaml", kGood + "  sync: auto\n");
  const core::TrainingSpec a = core::parse_job_spec_file(f.dir + "/job.yaml").training;
  CHECK(a.sync.mode == "auto");
  CHECK_FALSE(core::steps_locally(a));  // until the job chooses (core/train/sync_choice.h)
}

TEST_CASE("every refusal names a file location") {
  Fixture f;
  const std::string message = f.error_of(replace(kGood, "epochs: 2", "epochs: [1]"));
  CHECK(std::regex_search(message, std::regex("job\\.yaml:[0-9]+:[0-9]+: training\\.epochs")));
}

}  // namespace dtrain

namespace dtrain {

TEST_CASE("training.device: auto by default, cpu or gpu; anything else is refused", "[gpu]") {
  Fixture f;
  testing::write_text(f.dir + "/job.yaml", kGood);
  CHECK(core::parse_job_spec_file(f.dir + "/job.yaml").training.device == core::Device::kAuto);
  testing::write_text(f.dir + "/job.yaml", kGood + "  device: gpu\n");
  CHECK(core::parse_job_spec_file(f.dir + "/job.yaml").training.device == core::Device::kGpu);
  const std::string message = f.error_of(kGood + "  device: tpu\n");
  CHECK(message.find("training.device") != std::string::npos);
  CHECK(message.find("tpu") != std::string::npos);
  CHECK(message.find("auto, cpu, gpu") != std::string::npos);
}

}  // namespace dtrain

namespace dtrain {

TEST_CASE("absurd shapes are refused, never wrapped around", "[limits]") {
  Fixture f;
  const std::string huge_input = replace(kGood, "input: [2]", "input: [16777216, 16777216, 16777216]");
  REQUIRE(huge_input != kGood);
  const std::string message = f.error_of(huge_input);
  CHECK(message.find("more than 2^40 elements") != std::string::npos);
  CHECK(f.error_of(replace(kGood, "input: [2]", "input: [99999999999999999999]"))
            .find("expected integers from 1 to 16777216") != std::string::npos);
}

TEST_CASE("training.nodes: all, a count, or {min, max} (elastic)") {
  Fixture f;
  auto parse = [&](const std::string& nodes) {
    testing::write_text(f.dir + "/job.yaml",
                        replace(kGood, "epochs: 2", "epochs: 2\n  nodes: " + nodes));
    return core::parse_job_spec_file(f.dir + "/job.yaml").training;
  };
  CHECK(parse("all").nodes == 0);
  CHECK(parse("3").nodes == 3);
  CHECK(parse("3").nodes_max == 0);
  const core::TrainingSpec elastic = parse("{min: 3, max: 5}");
  CHECK(elastic.nodes == 3);
  CHECK(elastic.nodes_max == 5);
  CHECK(parse("{min: 4, max: 4}").nodes_max == 0);  // exactly 4
  auto nodes_in = [&](const std::string& nodes) {
    return replace(kGood, "epochs: 2", "epochs: 2\n  nodes: " + nodes);
  };
  CHECK(f.error_of(nodes_in("{min: 4, max: 2}")).find("max (2) is smaller than min (4)") !=
        std::string::npos);
  CHECK(f.error_of(nodes_in("{min: 2}")).find("training.nodes") != std::string::npos);
  CHECK(f.error_of(nodes_in("{min: 2, max: 3, most: 4}")).find("unknown key 'most'") !=
        std::string::npos);
  CHECK(f.error_of(nodes_in("{min: 2, max: 3}\n  mesh: mesh"))
            .find("runs on the plain mesh only") != std::string::npos);
  const std::string stops_early = f.error_of(
      nodes_in("{min: 2, max: 3}\n  early_stopping: {metric: loss, patience: 2}"));
  CHECK(stops_early.find("cannot stop early") != std::string::npos);
}

TEST_CASE("a cluster refuses an output.model outside its data_dir; --local does not") {
  Fixture f;
  auto spec_with = [&](const std::string& model) {
    testing::write_text(f.dir + "/job.yaml", kGood + "output: {model: " + model + "}\n");
    return core::parse_job_spec_file(f.dir + "/job.yaml");
  };
  for (const std::string good : {"demo.dtm", "runs/a/demo.dtm", "./x.dtm", "a//b.dtm", "..x.dtm"}) {
    INFO(good);
    CHECK_NOTHROW(core::check_cluster_rules(spec_with(good)));
  }
  for (const std::string bad : {"../../x.dtm", "runs/../../x.dtm", "x/..", "/tmp/x.dtm", "runs/",
                                "."}) {
    INFO(bad);
    const core::JobSpec spec = spec_with(bad);  // the parser takes it: --local writes it there
    try {
      core::check_cluster_rules(spec);
      FAIL_CHECK("a cluster took output.model " << bad);
    } catch (const core::UserError& e) {
      CHECK(e.what_happened().find("is not a file path inside the daemon's data directory") !=
            std::string::npos);
      CHECK(e.fix().find("without '..'") != std::string::npos);
    }
  }
}

}  // namespace dtrain
