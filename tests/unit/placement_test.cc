// Where a job's workers go (docs/architecture/daemon.md, "The controller"): the controller's rules
// for nodes with and without GPUs, its refusal of device: gpu without GPU nodes, and `--local`'s
// placement on this machine (with emulated GPUs, kernels/emulated).
#include <cstdlib>

#include <catch2/catch.hpp>

#include "core/spec/workers_per_node.h"
#include "core/train/device_placement.h"
#include "daemon/controller/placement.h"
#include "tests/test_util.h"

using dtrain::core::TrainingSpec;
using dtrain::daemon::NodeOffer;

namespace {
TrainingSpec training(const std::string& device, int64_t nodes = 0, int64_t workers = 0) {
  TrainingSpec t;
  t.device = *dtrain::core::parse_device(device);
  t.nodes = nodes;
  t.workers_per_node = workers;
  return t;
}
const NodeOffer kCpuNode{"cpu-node", 16, {}};
const NodeOffer kGpuNode{"gpu-node", 32, {0, 1}};
}  // namespace

TEST_CASE("auto: GPUs where a node has them, one worker per GPU; the CPU elsewhere", "[gpu]") {
  const auto on_gpu = dtrain::daemon::place_on(training("auto"), kGpuNode);
  CHECK(on_gpu.gpu);
  CHECK(on_gpu.workers == 2);
  CHECK(on_gpu.gpus == std::vector<uint32_t>{0, 1});
  const auto on_cpu = dtrain::daemon::place_on(training("auto"), kCpuNode);
  CHECK_FALSE(on_cpu.gpu);
  CHECK(on_cpu.workers == 8);  // one per core, at most 8
  CHECK(on_cpu.gpus.empty());
}

TEST_CASE("cpu keeps GPU nodes on their CPU; workers_per_node overrides the count", "[gpu]") {
  const auto p = dtrain::daemon::place_on(training("cpu"), kGpuNode);
  CHECK_FALSE(p.gpu);
  CHECK(p.workers == 8);
  const auto shared = dtrain::daemon::place_on(training("gpu", 0, 4), kGpuNode);
  CHECK(shared.gpu);
  CHECK(shared.workers == 4);  // two workers per GPU, each on its own stream
  TrainingSpec averaging = training("gpu");
  averaging.mode = dtrain::core::TrainingMode::kParameterAveraging;
  CHECK(dtrain::daemon::place_on(averaging, kGpuNode).workers == 1);
}

TEST_CASE("device: gpu only takes nodes with a GPU", "[gpu]") {
  CHECK(dtrain::daemon::node_eligible(training("gpu"), kGpuNode));
  CHECK_FALSE(dtrain::daemon::node_eligible(training("gpu"), kCpuNode));
  CHECK(dtrain::daemon::node_eligible(training("auto"), kCpuNode));
}

TEST_CASE("device: gpu is refused at submit when the GPU nodes cannot cover it", "[gpu]") {
  using dtrain::daemon::refuse_placement;
  // Nothing registered yet: the job waits for nodes instead.
  CHECK_FALSE(refuse_placement(training("gpu"), {}).has_value());
  const auto none = refuse_placement(training("gpu"), {kCpuNode});
  REQUIRE(none.has_value());
  CHECK(none->error.find("0 of the 1 registered nodes have a GPU (without: cpu-node)") !=
        std::string::npos);
  CHECK(none->fix.find("training.device: auto or cpu") != std::string::npos);
  // nodes: all on a mixed cluster would put workers on a node without a GPU.
  const auto mixed = refuse_placement(training("gpu"), {kCpuNode, kGpuNode});
  REQUIRE(mixed.has_value());
  CHECK(mixed->fix.find("training.nodes to at most 1") != std::string::npos);
  CHECK_FALSE(refuse_placement(training("gpu", 1), {kCpuNode, kGpuNode}).has_value());
  CHECK(refuse_placement(training("gpu", 2), {kCpuNode, kGpuNode}).has_value());
  CHECK_FALSE(refuse_placement(training("auto"), {kCpuNode}).has_value());
}

TEST_CASE("--local: device gpu without a GPU is refused; emulated GPUs are used", "[gpu]") {
  dtrain::core::JobSpec job = dtrain::testing::job_with_model(
      "  input: [4]\n  layers:\n    - output: {units: 2, activation: softmax, loss: mcxent}\n");
  job.training.device = dtrain::core::Device::kGpu;
  unsetenv("DTRAIN_EMULATED_GPUS");
  try {
    dtrain::core::place_local(job);
    FAIL("device: gpu was accepted without a GPU");
  } catch (const dtrain::core::UserError& e) {
    CHECK(std::string(e.what()).find("offers no GPU") != std::string::npos);
    CHECK(e.fix().find("training.device: auto") != std::string::npos);
  }
  job.training.device = dtrain::core::Device::kAuto;
  CHECK(dtrain::core::place_local(job).gpus.empty());
  setenv("DTRAIN_EMULATED_GPUS", "2", 1);
  const auto p = dtrain::core::place_local(job);
  unsetenv("DTRAIN_EMULATED_GPUS");
  CHECK(p.gpus == std::vector<int>{0, 1});
  CHECK(p.workers == 2);
  CHECK(p.description.find("GPU 1 (emulated") != std::string::npos);
}

TEST_CASE("workers per node: one rule for --local, the controller and GPU placement") {
  using dtrain::core::workers_per_node;
  CHECK(workers_per_node(training("auto"), 2, 0) == 2);    // one per core...
  CHECK(workers_per_node(training("auto"), 64, 0) == 8);   // ...up to 8
  CHECK(workers_per_node(training("auto"), 0, 0) == 1);    // cores unknown: one
  CHECK(workers_per_node(training("auto"), 64, 3) == 3);   // one per GPU
  CHECK(workers_per_node(training("auto", 0, 5), 2, 3) == 5);  // the spec's number
  TrainingSpec averaging = training("auto");
  averaging.mode = dtrain::core::TrainingMode::kParameterAveraging;
  CHECK(workers_per_node(averaging, 64, 0) == 1);  // averaging: one per node, CPU or GPU
  CHECK(workers_per_node(averaging, 64, 4) == 1);
  // The controller's placement is the same rule with the node's offer.
  CHECK(dtrain::daemon::place_on(training("auto"), NodeOffer{"small", 3, {}}).workers == 3);
}
