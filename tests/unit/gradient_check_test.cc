// Finite-difference gradient checks: every layer, activation and loss. The analytic gradient
// from Model::compute_gradients must match central differences of the loss.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>

#include "core/model/layout_plan.h"
#include "core/model/model.h"
#include "tests/skip.h"
#include "tests/test_util.h"

namespace dtrain {
namespace {

struct CheckResult {
  int checked = 0;
  int bad = 0;
  std::string first_bad;
};

// Checks up to `samples` parameters spread over the whole vector (parameter 0 always).
// `corrupt` may change the analytic gradient before the comparison (the checker's own test).
CheckResult check_gradients(const std::string& model_yaml, int64_t batch, bool one_hot,
                            float relative_eps, int samples = 60,
                            const std::function<void(std::vector<float>&)>& corrupt = {}) {
  core::JobSpec job = testing::job_with_model(model_yaml);
  core::Model model(job.model);
  model.init(7);
  core::Rng data_rng(99);
  core::Tensor x(core::with_batch(batch, job.model.input));
  for (int64_t i = 0; i < x.size(); ++i) x[i] = data_rng.uniform(-1.0f, 1.0f);
  const int64_t k = model.num_outputs();
  core::Tensor y({batch, k});
  for (int64_t r = 0; r < batch; ++r)
    for (int64_t c = 0; c < k; ++c)
      y[r * k + c] = one_hot ? (c == r % k ? 1.0f : 0.0f) : data_rng.uniform(0.05f, 0.95f);

  // Same dropout mask for every evaluation: a fresh generator with a fixed seed.
  auto loss_at = [&] {
    core::Rng rng(5);
    return model.compute_gradients(x, y, rng);
  };
  loss_at();
  std::vector<float> analytic(model.grads(), model.grads() + model.num_params());
  if (corrupt) corrupt(analytic);
  CheckResult result;
  const int64_t n = model.num_params();
  const int64_t stride = std::max<int64_t>(1, n / samples);
  for (int64_t i = 0; i < n; i += stride) {
    float* p = model.params() + i;
    const float saved = *p;
    const float eps = relative_eps * std::max(1.0f, std::fabs(saved));
    *p = saved + eps;
    const double up = loss_at();
    *p = saved - eps;
    const double down = loss_at();
    *p = saved;
    const double numeric = (up - down) / (2.0 * eps);
    const double a = analytic[i];
    const double tolerance = 3e-2 * std::max(std::fabs(numeric), std::fabs(a)) + 2e-4;
    ++result.checked;
    if (std::fabs(numeric - a) > tolerance) {
      if (!result.bad)
        result.first_bad = "param " + std::to_string(i) + ": analytic " + std::to_string(a) +
                           " numeric " + std::to_string(numeric);
      ++result.bad;
    }
  }
  return result;
}

// Max pooling and ReLU-like kinks need a small step: a large one can move an argmax.
void expect_gradients_match(const std::string& model_yaml, int64_t batch = 4,
                            bool one_hot = true, float relative_eps = 1e-2f) {
  CheckResult r = check_gradients(model_yaml, batch, one_hot, relative_eps);
  INFO(model_yaml << "\n" << r.first_bad);
  REQUIRE(r.checked > 5);
  CHECK(r.bad == 0);
}

}  // namespace

TEST_CASE("dense layer gradients for every activation", "[gradcheck]") {
  for (const char* act : {"identity", "relu", "leakyrelu", "tanh", "sigmoid", "softmax"}) {
    SECTION(act) {
      expect_gradients_match(std::string("  input: [6]\n  layers:\n") +
                             "    - dense: {units: 5, activation: " + act + "}\n" +
                             "    - output: {units: 3, activation: softmax, loss: mcxent}\n");
    }
  }
}

TEST_CASE("output layer gradients for every loss", "[gradcheck]") {
  SECTION("softmax + mcxent") {
    expect_gradients_match("  input: [5]\n  layers:\n"
                           "    - output: {units: 4, activation: softmax, loss: mcxent}\n");
  }
  SECTION("sigmoid + xent") {
    expect_gradients_match("  input: [5]\n  layers:\n"
                           "    - dense: {units: 4, activation: tanh}\n"
                           "    - output: {units: 3, activation: sigmoid, loss: xent}\n",
                           4, false);
  }
  SECTION("identity + mse") {
    expect_gradients_match("  input: [5]\n  layers:\n"
                           "    - dense: {units: 4, activation: sigmoid}\n"
                           "    - output: {units: 3, activation: identity, loss: mse}\n",
                           4, false);
  }
  SECTION("tanh + mse (non-fused path)") {
    expect_gradients_match("  input: [5]\n  layers:\n"
                           "    - output: {units: 3, activation: tanh, loss: mse}\n",
                           4, false);
  }
}

TEST_CASE("convolution and max subsampling gradients", "[gradcheck]") {
  expect_gradients_match("  input: [2, 9, 9]\n  layers:\n"
                         "    - convolution: {filters: 3, kernel: [3, 3], stride: [1, 1], "
                         "padding: [1, 1], activation: tanh}\n"
                         "    - subsampling: {type: max, kernel: [2, 2], stride: [2, 2]}\n"
                         "    - convolution: {filters: 2, kernel: [2, 2], stride: [2, 2], "
                         "activation: leakyrelu}\n"
                         "    - output: {units: 3, activation: softmax, loss: mcxent}\n",
                         4, true, 1e-3f);
}

TEST_CASE("average subsampling and global pooling gradients", "[gradcheck]") {
  SECTION("avg subsampling + global avg") {
    expect_gradients_match("  input: [2, 8, 8]\n  layers:\n"
                           "    - convolution: {filters: 3, kernel: 3, activation: sigmoid}\n"
                           "    - subsampling: {type: avg, kernel: 2, stride: 2}\n"
                           "    - global_pooling: {type: avg}\n"
                           "    - output: {units: 3, activation: softmax, loss: mcxent}\n");
  }
  SECTION("global max") {
    expect_gradients_match("  input: [2, 6, 6]\n  layers:\n"
                           "    - convolution: {filters: 4, kernel: 3, activation: tanh}\n"
                           "    - global_pooling: {type: avg}\n"
                           "    - output: {units: 3, activation: softmax, loss: mcxent}\n");
  }
}

TEST_CASE("batch norm gradients (dense and convolutional)", "[gradcheck]") {
  SECTION("after dense") {
    expect_gradients_match("  input: [6]\n  layers:\n"
                           "    - dense: {units: 5, activation: identity}\n"
                           "    - batch_norm: {}\n"
                           "    - dense: {units: 4, activation: tanh}\n"
                           "    - output: {units: 3, activation: softmax, loss: mcxent}\n",
                           6);
  }
  SECTION("after convolution") {
    expect_gradients_match("  input: [1, 6, 6]\n  layers:\n"
                           "    - convolution: {filters: 2, kernel: 3}\n"
                           "    - batch_norm:\n"
                           "    - output: {units: 3, activation: softmax, loss: mcxent}\n",
                           4);
  }
}

// Sixteen channels: a multiple of the channel block the CPU's convolutions use (8 with AVX2, 16
// with AVX-512), so these layers keep their activations blocked (core/model/layout_plan.h) and
// the blocked batch norm, pooling and add run, forward and backward.
TEST_CASE("blocked layouts: a 16-channel residual block, pooling and global pooling",
          "[gradcheck]") {
  const std::string model =
      "  input: [2, 6, 6]\n  layers:\n"
      "    - convolution: {name: stem, filters: 16, kernel: 3, padding: same}\n"
      "    - batch_norm: {name: stem_bn, activation: tanh}\n"
      "    - convolution: {filters: 16, kernel: 3, padding: same}\n"
      "    - batch_norm: {activation: tanh}\n"
      "    - convolution: {filters: 16, kernel: 3, padding: same}\n"
      "    - batch_norm: {name: bn2}\n"
      "    - add: {inputs: [bn2, stem_bn], activation: tanh}\n"
      "    - subsampling: {type: avg, kernel: 2, stride: 2}\n"
      "    - convolution: {filters: 16, kernel: 3, padding: same, activation: tanh}\n"
      "    - global_pooling: {type: avg}\n"
      "    - output: {units: 3, activation: softmax, loss: mcxent}\n";
  const int64_t block = kernels::backend().activation_block();
  if (block == 0) DTRAIN_SKIP("this CPU's convolutions keep plain NCHW: nothing is blocked");
  const core::JobSpec job = testing::job_with_model(model);
  const std::vector<int64_t> planned = core::plan_output_blocks(core::build_graph(job.model), block);
  // Every layer up to the global pooling writes blocked activations; that and the output don't.
  const std::vector<int64_t> expected = {block, block, block, block, block, block, block, block,
                                         block, 0, 0};
  CHECK(planned == expected);
  CheckResult r = check_gradients(model, 4, true, 2e-3f, 120);
  INFO(r.first_bad);
  REQUIRE(r.checked > 100);
  CHECK(r.bad == 0);
}

TEST_CASE("dropout gradients with a fixed mask", "[gradcheck]") {
  expect_gradients_match("  input: [6]\n  layers:\n"
                         "    - dense: {units: 8, activation: tanh}\n"
                         "    - dropout: {rate: 0.3}\n"
                         "    - output: {units: 3, activation: softmax, loss: mcxent}\n");
}

// Graph models (core/model/model_graph.h): every parameter is checked, so each branch is.
void expect_graph_gradients_match(const std::string& model_yaml, float relative_eps = 1e-2f) {
  CheckResult r = check_gradients(model_yaml, 4, true, relative_eps, 100000);
  INFO(model_yaml << "\n" << r.first_bad);
  REQUIRE(r.checked > 20);
  CHECK(r.bad == 0);
}

TEST_CASE("graph models: add, concat, flatten and same padding", "[gradcheck]") {
  SECTION("a residual block with a projection shortcut (stride 2, same padding)") {
    expect_graph_gradients_match(
        "  input: [2, 7, 7]\n  layers:\n"
        "    - convolution: {name: stem, filters: 3, kernel: 3, padding: same, activation: tanh}\n"
        "    - convolution: {filters: 4, kernel: 3, stride: 2, padding: same}\n"
        "    - batch_norm: {name: bn1, activation: tanh}\n"
        "    - convolution: {name: c2, filters: 4, kernel: 3, padding: same}\n"
        "    - convolution: {name: proj, inputs: [stem], filters: 4, kernel: 1, stride: 2}\n"
        "    - add: {inputs: [c2, proj], activation: tanh}\n"
        "    - global_pooling: {type: avg}\n"
        "    - output: {units: 3, activation: softmax, loss: mcxent}\n");
  }
  SECTION("an identity shortcut from the input, and a layer listed before its input") {
    expect_graph_gradients_match(
        "  input: [6]\n  layers:\n"
        "    - add: {name: sum, inputs: [input, branch]}\n"
        "    - dense: {name: branch, inputs: [input], units: 6, activation: tanh}\n"
        "    - dense: {inputs: [sum], units: 5, activation: tanh}\n"
        "    - output: {units: 3, activation: softmax, loss: mcxent}\n");
  }
  SECTION("concat of two convolution branches, flattened next to a dense branch") {
    expect_graph_gradients_match(
        "  input: [2, 5, 5]\n  layers:\n"
        "    - convolution: {name: a, inputs: [input], filters: 2, kernel: 3, padding: same, "
        "activation: tanh}\n"
        "    - convolution: {name: b, inputs: [input], filters: 3, kernel: 1, activation: sigmoid}\n"
        "    - concat: {name: ab, inputs: [a, b]}\n"
        "    - subsampling: {type: avg, kernel: 3, stride: 2, padding: same}\n"
        "    - flatten: {name: flat}\n"
        "    - dense: {name: side, inputs: [ab], units: 4, activation: tanh}\n"
        "    - concat: {inputs: [flat, side]}\n"
        "    - output: {units: 3, activation: softmax, loss: mcxent}\n");
  }
  SECTION("one layer read twice by the same add, and by two layers") {
    expect_graph_gradients_match(
        "  input: [4]\n  layers:\n"
        "    - dense: {name: h, units: 5, activation: tanh}\n"
        "    - add: {name: twice, inputs: [h, h]}\n"
        "    - dense: {name: g, inputs: [h], units: 5, activation: sigmoid}\n"
        "    - add: {inputs: [twice, g], activation: tanh}\n"
        "    - output: {units: 2, activation: softmax, loss: mcxent}\n");
  }
  SECTION("batch norm followed by relu") {
    // A small step: batch statistics couple every value, so a larger one crosses ReLU kinks.
    expect_graph_gradients_match(
        "  input: [1, 6, 6]\n  layers:\n"
        "    - convolution: {filters: 3, kernel: 3, padding: same}\n"
        "    - batch_norm: {activation: relu}\n"
        "    - global_pooling: {type: avg}\n"
        "    - output: {units: 3, activation: softmax, loss: mcxent}\n",
        1e-4f);
  }
}

TEST_CASE("a wrong gradient is caught by the check", "[gradcheck]") {
  // Guards the checker itself: the same model passes with its own gradient and fails, at the
  // corrupted parameter, when one analytic gradient is off by 0.5.
  const std::string model =
      "  input: [3]\n  layers:\n    - dense: {units: 4, activation: tanh}\n"
      "    - output: {units: 2, activation: softmax, loss: mcxent}\n";
  const CheckResult good = check_gradients(model, 4, true, 1e-2f);
  CHECK(good.checked > 5);
  CHECK(good.bad == 0);
  const CheckResult bad = check_gradients(model, 4, true, 1e-2f, 60,
                                          [](std::vector<float>& g) { g[0] += 0.5f; });
  CHECK(bad.bad == 1);
  CHECK(bad.first_bad.rfind("param 0:", 0) == 0);
}

}  // namespace dtrain
