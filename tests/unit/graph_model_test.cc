// Graph models (core/model/model_graph.h): wiring, shapes, the refusals that name the layer, a
// plain stack that behaves exactly as before, and the ResNet-20 config on 28x28 and 32x32.
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>
#include <iterator>

#include "core/model/model.h"
#include "core/spec/job_spec_parser.h"
#include "tests/test_util.h"

namespace dtrain {
namespace {

std::string error_of(const std::string& model_yaml) {
  try {
    testing::job_with_model(model_yaml);
    return "";
  } catch (const core::UserError& e) {
    return e.what();
  }
}

// Gradients of one minibatch, for comparing two ways of writing one model.
std::vector<float> gradients_of(const std::string& model_yaml, double* loss) {
  core::JobSpec job = testing::job_with_model(model_yaml);
  core::Model model(job.model);
  model.init(3);
  core::Rng rng(11);
  core::Tensor x(core::with_batch(5, job.model.input)), y({5, model.num_outputs()});
  for (int64_t i = 0; i < x.size(); ++i) x[i] = rng.uniform(-1.0f, 1.0f);
  y.zero();
  for (int64_t r = 0; r < 5; ++r) y[r * model.num_outputs() + r % model.num_outputs()] = 1.0f;
  core::Rng step_rng(1);
  *loss = model.compute_gradients(x, y, step_rng);
  return {model.grads(), model.grads() + model.num_params()};
}

// The two shipped ResNet-20 configs (CIFAR-10's image folders need not exist here).
core::JobSpec resnet20(const std::string& input) {
  const bool cifar = input == "[3, 32, 32]";
  const std::string path = cifar ? "configs/cifar10-resnet20.yaml" : "configs/fashion-mnist-resnet20.yaml";
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  REQUIRE(text.find("input: " + input) != std::string::npos);
  core::SpecParseOptions options;
  options.check_files = false;
  return core::parse_job_spec_text(text, path, options);
}

}  // namespace

TEST_CASE("a stack written as a graph is the same model, bit for bit") {
  const std::string stack =
      "  input: [2, 6, 6]\n  layers:\n"
      "    - convolution: {filters: 3, kernel: 3, activation: relu}\n"
      "    - batch_norm: {}\n"
      "    - dense: {units: 5, activation: tanh}\n"
      "    - output: {units: 3, activation: softmax, loss: mcxent}\n";
  const std::string graph =
      "  input: [2, 6, 6]\n  layers:\n"
      "    - convolution: {name: c, inputs: [input], filters: 3, kernel: 3, activation: relu}\n"
      "    - batch_norm: {name: bn, inputs: [c]}\n"
      "    - dense: {name: d, inputs: bn, units: 5, activation: tanh}\n"
      "    - output: {inputs: [d], units: 3, activation: softmax, loss: mcxent}\n";
  double loss_a = 0, loss_b = 0;
  const auto a = gradients_of(stack, &loss_a);
  const auto b = gradients_of(graph, &loss_b);
  REQUIRE(a.size() == b.size());
  CHECK(loss_a == loss_b);
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

TEST_CASE("layers run after their inputs whatever order the spec lists them in") {
  core::JobSpec job = testing::job_with_model(
      "  input: [4]\n  layers:\n"
      "    - add: {name: sum, inputs: [left, right]}\n"
      "    - dense: {name: right, inputs: [input], units: 3}\n"
      "    - dense: {name: left, inputs: [input], units: 3}\n"
      "    - output: {inputs: [sum], units: 2}\n");
  const core::ModelGraph g = core::build_graph(job.model);
  CHECK(g.order == std::vector<int>{1, 2, 0, 3});
  CHECK(g.inputs[0] == std::vector<int>{2, 1});
  CHECK(g.inputs[1] == std::vector<int>{core::kModelInput});
  CHECK(g.readers == std::vector<int>{1, 1, 1, 0});
  // Parameters stay in the spec's order: right's 4x3+3 come before left's.
  core::Model model(job.model);
  CHECK(model.segments()[0].offset == 0);
  CHECK(model.segments()[0].size == 12);
  CHECK(model.segments()[2].offset == 15);
}

TEST_CASE("same padding keeps the size at stride 1 and halves it (rounding up) at stride 2") {
  core::JobSpec job = testing::job_with_model(
      "  input: [1, 7, 7]\n  layers:\n"
      "    - convolution: {filters: 2, kernel: 3, padding: same}\n"
      "    - convolution: {filters: 2, kernel: 5, stride: 2, padding: same}\n"
      "    - subsampling: {type: max, kernel: 3, stride: 2, padding: same}\n"
      "    - flatten:\n"
      "    - output: {units: 2}\n");
  const auto layers = core::build_layers(job.model);
  CHECK(layers[0]->output_shape() == core::Shape{2, 7, 7});
  CHECK(layers[1]->output_shape() == core::Shape{2, 4, 4});
  CHECK(layers[2]->output_shape() == core::Shape{2, 2, 2});
  CHECK(layers[3]->output_shape() == core::Shape{8});
}

TEST_CASE("a malformed graph is refused with the layer named and a fix") {
  struct Case {
    const char* what;
    std::string layers;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {"a cycle",
       "    - dense: {name: a, inputs: [b], units: 3}\n"
       "    - dense: {name: b, inputs: [a], units: 3}\n"
       "    - output: {inputs: [b], units: 2}\n",
       {"model.layers[0]", "cycle", "'a' -> 'b' -> 'a'"}},
      {"a layer reading itself",
       "    - dense: {name: a, inputs: [a], units: 3}\n"
       "    - output: {units: 2}\n",
       {"model.layers[0]", "cycle: 'a' -> 'a'"}},
      {"an unknown input",
       "    - dense: {name: hidden, units: 3}\n"
       "    - output: {inputs: [hiden], units: 2}\n",
       {"model.layers[1]", "reads 'hiden'", "no layer has that name", "did you mean 'hidden'"}},
      {"add of mismatched shapes",
       "    - dense: {name: a, units: 3}\n"
       "    - dense: {name: b, inputs: [input], units: 4}\n"
       "    - add: {name: join, inputs: [a, b]}\n"
       "    - output: {units: 2}\n",
       {"model.layers[2]", "layer 'join'", "add needs inputs of one shape", "[3] and [4]"}},
      {"a merge with one input",
       "    - dense: {name: a, units: 3}\n"
       "    - add: {inputs: [a]}\n"
       "    - output: {units: 2}\n",
       {"model.layers[1].add.inputs", "at least two inputs"}},
      {"two inputs to a one-input layer",
       "    - dense: {name: a, units: 3}\n"
       "    - dense: {inputs: [a, input], units: 3}\n"
       "    - output: {units: 2}\n",
       {"model.layers[1].dense.inputs", "takes one input, got 2", "'add' or 'concat'"}},
      {"a layer nobody reads",
       "    - dense: {name: lost, units: 3}\n"
       "    - dense: {inputs: [input], units: 3}\n"
       "    - output: {units: 2}\n",
       {"model.layers[0]", "'lost' is not read by any layer"}},
      {"a duplicate name",
       "    - dense: {name: a, units: 3}\n"
       "    - dense: {name: a, units: 3}\n"
       "    - output: {units: 2}\n",
       {"model.layers[1]", "two layers are named 'a'"}},
      {"the input's name taken",
       "    - dense: {name: input, units: 3}\n"
       "    - output: {units: 2}\n",
       {"model.layers[0].dense.name", "'input' is the model's input"}},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    const std::string message = error_of("  input: [4]\n  layers:\n" + c.layers);
    INFO(message);
    REQUIRE_FALSE(message.empty());
    for (const auto& part : c.expected) CHECK_THAT(message, Catch::Contains(part));
  }
  SECTION("concat of maps of different sizes") {
    const std::string message = error_of(
        "  input: [1, 8, 8]\n  layers:\n"
        "    - convolution: {name: a, filters: 2, kernel: 3}\n"
        "    - convolution: {name: b, inputs: [input], filters: 2, kernel: 3, padding: same}\n"
        "    - concat: {name: ab, inputs: [a, b]}\n"
        "    - output: {units: 2}\n");
    CHECK_THAT(message, Catch::Contains("model.layers[2]"));
    CHECK_THAT(message, Catch::Contains("layer 'ab'"));
    CHECK_THAT(message, Catch::Contains("[2, 6, 6] and [2, 8, 8]"));
  }
  SECTION("same padding with an even kernel") {
    const std::string message = error_of(
        "  input: [1, 8, 8]\n  layers:\n"
        "    - convolution: {filters: 2, kernel: 2, padding: same}\n"
        "    - output: {units: 2}\n");
    CHECK_THAT(message, Catch::Contains("model.layers[0].convolution.padding"));
    CHECK_THAT(message, Catch::Contains("needs an odd kernel"));
  }
}

TEST_CASE("the ResNet-20 configs: 20 weighted layers, 0.27M parameters, 28x28 and 32x32") {
  for (const char* input : {"[1, 28, 28]", "[3, 32, 32]"}) {
    SECTION(input) {
      core::JobSpec job = resnet20(input);
      const core::ModelGraph g = core::build_graph(job.model);
      int convolutions = 0, adds = 0;
      for (const auto& layer : g.layers) {
        convolutions += layer->kind() == "convolution";
        adds += layer->kind() == "add";
      }
      CHECK(convolutions == 19 + 2);  // 19 on the main path, 2 projection shortcuts
      CHECK(adds == 9);
      const bool mnist = std::string(input) == "[1, 28, 28]";
      // The last stage's maps: 7x7 from 28 (28 -> 14 -> 7), 8x8 from 32.
      const core::Shape last = g.layers[g.layers.size() - 3]->output_shape();
      CHECK(last == (mnist ? core::Shape{64, 7, 7} : core::Shape{64, 8, 8}));
      const int64_t params = core::count_model(job.model).params;
      CHECK(params > 260000);
      CHECK(params < 280000);

      core::Model model(job.model);
      model.init(1);
      core::Tensor x(core::with_batch(2, job.model.input)), y({2, 10});
      core::Rng rng(2);
      for (int64_t i = 0; i < x.size(); ++i) x[i] = rng.uniform(0.0f, 1.0f);
      y.zero();
      y[3] = y[10 + 7] = 1.0f;
      const double loss = model.compute_gradients(x, y, rng);
      CHECK(std::isfinite(loss));
      CHECK(loss > 1.0);  // near ln(10) at initialisation
      double g2 = 0;
      for (int64_t i = 0; i < model.num_params(); ++i) g2 += double(model.grads()[i]) * model.grads()[i];
      CHECK(g2 > 0);
    }
  }
}

}  // namespace dtrain
