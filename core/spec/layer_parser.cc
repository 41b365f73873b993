#include "core/spec/layer_parser.h"

#include <algorithm>
#include <set>

namespace dtrain::core {
namespace {

const std::vector<std::string> kLayerTypes = {
    "dense",   "convolution", "subsampling", "global_pooling", "batch_norm",
    "dropout", "output",      "add",         "concat",         "flatten"};

class LayerParser {
 public:
  explicit LayerParser(const SpecReader& r) : r_(r) {}

  LayerSpec parse(const YAML::Node& item, const std::string& path) {
    const std::string type = r_.single_key(item, path, kLayerTypes);
    YAML::Node body = item[type];
    if (!body || body.IsNull()) body = YAML::Node(YAML::NodeType::Map);
    const std::string p = path + "." + type;
    LayerSpec l;
    l.location = r_.location(item);
    if (type == "dense" || type == "output") {
      dense_or_output(l, body, p, type == "output");
    } else if (type == "convolution") {
      expect(body, p, {"filters", "kernel", "stride", "padding", "activation"});
      l.kind = LayerSpec::Kind::kConvolution;
      l.conv.filters = r_.integer(body, "filters", p, std::nullopt, 1, 1 << 16);
      l.conv.window = window(body, p, 3, false);
      l.conv.activation = activation(body, p, "identity");
    } else if (type == "subsampling") {
      expect(body, p, {"type", "kernel", "stride", "padding"});
      l.kind = LayerSpec::Kind::kSubsampling;
      l.pool.max = r_.choice(body, "type", p, std::string("max"), {"max", "avg"}) == "max";
      l.pool.window = window(body, p, 2, true);
    } else if (type == "global_pooling") {
      expect(body, p, {"type"});
      l.kind = LayerSpec::Kind::kGlobalPooling;
      l.global_max = r_.choice(body, "type", p, std::string("avg"), {"avg", "max"}) == "max";
    } else if (type == "batch_norm") {
      expect(body, p, {"decay", "eps", "activation"});
      l.kind = LayerSpec::Kind::kBatchNorm;
      l.bn_decay = static_cast<float>(r_.number(body, "decay", p, 0.9, 0.0, 1.0, false));
      l.bn_eps = static_cast<float>(r_.number(body, "eps", p, 1e-5, 0.0, 1.0, true));
      l.activation = activation(body, p, "identity");
    } else if (type == "dropout") {
      expect(body, p, {"rate"});
      l.kind = LayerSpec::Kind::kDropout;
      l.dropout_rate =
          static_cast<float>(r_.number(body, "rate", p, std::nullopt, 0.0, 0.95, false));
    } else if (type == "add") {
      expect(body, p, {"activation"});
      l.kind = LayerSpec::Kind::kAdd;
      l.activation = activation(body, p, "identity");
    } else if (type == "concat") {
      expect(body, p, {});
      l.kind = LayerSpec::Kind::kConcat;
    } else {
      expect(body, p, {});
      l.kind = LayerSpec::Kind::kFlatten;
    }
    wiring(l, body, p);
    return l;
  }

 private:
  // Every layer type also takes `name` and `inputs`.
  void expect(const YAML::Node& body, const std::string& p, std::vector<std::string> keys) {
    keys.push_back("name");
    keys.push_back("inputs");
    r_.expect_map(body, p, keys);
  }

  Activation activation(const YAML::Node& body, const std::string& p, const char* fallback) {
    return parse_activation(r_.choice(body, "activation", p, std::string(fallback),
                                      activation_names()));
  }

  void dense_or_output(LayerSpec& l, const YAML::Node& body, const std::string& p, bool out) {
    expect(body, p, out ? std::vector<std::string>{"units", "activation", "loss"}
                        : std::vector<std::string>{"units", "activation"});
    l.kind = out ? LayerSpec::Kind::kOutput : LayerSpec::Kind::kDense;
    l.units = r_.integer(body, "units", p, std::nullopt, 1, 1 << 24);
    l.activation = activation(body, p, out ? "softmax" : "relu");
    if (!out) return;
    l.loss = parse_loss(r_.choice(body, "loss", p, std::string("mcxent"), loss_names()));
    if (l.loss == Loss::kMcxent && l.activation != Activation::kSoftmax)
      r_.fail(body, p, "loss mcxent needs activation softmax (outputs must sum to 1)",
              "set 'activation: softmax', or use loss xent with sigmoid, or mse");
    if (l.loss == Loss::kXent && l.activation != Activation::kSigmoid)
      r_.fail(body, p, "loss xent needs activation sigmoid (outputs must lie in (0, 1))",
              "set 'activation: sigmoid', or use loss mse");
  }

  // `name` and `inputs`. How many inputs a layer takes is known here; whether they exist and
  // form no cycle is the graph builder's check.
  void wiring(LayerSpec& l, const YAML::Node& body, const std::string& p) {
    if (body["name"]) {
      l.name = r_.text(body, "name", p, std::nullopt);
      for (char c : l.name)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.')
          r_.fail(body["name"], p + ".name", "'" + l.name + "' contains '" + std::string(1, c) + "'",
                  "use letters, digits, '_', '-' and '.' only");
      if (l.name.empty() || l.name == kModelInputName)
        r_.fail(body["name"], p + ".name",
                "'" + l.name + "' cannot name a layer ('" + kModelInputName +
                    "' is the model's input)",
                "choose another name, e.g. 'block1_add'");
    }
    const YAML::Node in = body["inputs"];
    if (in) {
      if (in.IsScalar()) {
        l.inputs.push_back(in.Scalar());
      } else if (in.IsSequence()) {
        for (const auto& item : in) {
          if (!item.IsScalar() || item.Scalar().empty())
            r_.fail(item, p + ".inputs", "expected a layer name",
                    "list names of layers (or 'input' for the model's input)");
          l.inputs.push_back(item.Scalar());
        }
      } else {
        r_.fail(in, p + ".inputs", "expected a list of layer names",
                "write e.g. 'inputs: [block1_bn2, stem]'");
      }
    }
    const bool merge = l.kind == LayerSpec::Kind::kAdd || l.kind == LayerSpec::Kind::kConcat;
    if (merge && l.inputs.size() < 2)
      r_.fail(in ? in : body, p + ".inputs", "a merge layer needs at least two inputs",
              "name the layers it merges, e.g. 'inputs: [block1_bn2, stem]'");
    if (!merge && l.inputs.size() > 1)
      r_.fail(in, p + ".inputs", "this layer takes one input, got " +
                                     std::to_string(l.inputs.size()),
              "merge them first with an 'add' or 'concat' layer");
  }

  // kernel / stride / padding of a convolution or subsampling layer. The stride defaults to 1,
  // or to the kernel size (non-overlapping windows) when `stride_follows_kernel`. `padding:
  // same` pads (k - 1) / 2 per side, so the output is ceil(input / stride).
  kernels::Window2d window(const YAML::Node& body, const std::string& p, int64_t default_kernel,
                           bool stride_follows_kernel) {
    auto k = r_.int_list(body, "kernel", p, {default_kernel, default_kernel}, 2, 1);
    auto s = r_.int_list(body, "stride", p,
                         stride_follows_kernel ? k : std::vector<int64_t>{1, 1}, 2, 1);
    kernels::Window2d w;
    w.kernel_h = k[0], w.kernel_w = k[1];
    w.stride_h = s[0], w.stride_w = s[1];
    const YAML::Node pad = body["padding"];
    if (pad && pad.IsScalar() && pad.Scalar() == "same") {
      if (k[0] % 2 == 0 || k[1] % 2 == 0)
        r_.fail(pad, p + ".padding",
                "'same' padding needs an odd kernel, got " + std::to_string(k[0]) + "x" +
                    std::to_string(k[1]),
                "use an odd kernel (3, 5, ...) or give the padding as numbers, e.g. [1, 1]");
      w.pad_h = (k[0] - 1) / 2, w.pad_w = (k[1] - 1) / 2;
      return w;
    }
    if (pad && pad.IsScalar() && !pad.Scalar().empty() &&
        std::isalpha(static_cast<unsigned char>(pad.Scalar()[0])))
      r_.fail(pad, p + ".padding", "expected 'same' or [height, width], got '" + pad.Scalar() + "'",
              "write 'padding: same' or e.g. 'padding: [1, 1]'");
    auto padding = r_.int_list(body, "padding", p, {0, 0}, 2, 0);
    w.pad_h = padding[0], w.pad_w = padding[1];
    return w;
  }

  const SpecReader& r_;
};

}  // namespace

std::vector<LayerSpec> parse_layers(const SpecReader& r, const YAML::Node& model) {
  const YAML::Node layers = model["layers"];
  if (!layers || !layers.IsSequence() || layers.size() == 0)
    r.fail(layers ? layers : model, "model.layers", "expected a non-empty list of layers",
           "list layers under 'layers:', ending with '- output: {units: 10}'");
  constexpr size_t kMaxLayers = 4096;  // far beyond any real model; bounds the graph checks
  if (layers.size() > kMaxLayers)
    r.fail(layers, "model.layers", "more than " + std::to_string(kMaxLayers) + " layers",
           "write a smaller model");
  LayerParser parser(r);
  std::vector<LayerSpec> out;
  std::set<std::string> names;
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string path = "model.layers[" + std::to_string(i) + "]";
    out.push_back(parser.parse(layers[i], path));
    const LayerSpec& l = out.back();
    if (!l.name.empty() && !names.insert(l.name).second)
      r.fail(layers[i], path, "two layers are named '" + l.name + "'",
             "give each layer its own name");
    const bool last = i + 1 == layers.size();
    if (l.kind == LayerSpec::Kind::kOutput && !last)
      r.fail(layers[i], path, "the output layer must be the last layer",
             "move '- output: ...' to the end of model.layers");
    if (last && l.kind != LayerSpec::Kind::kOutput)
      r.fail(layers[i], path, "the last layer must be an output layer",
             "end model.layers with e.g. '- output: {units: 10, activation: softmax, loss: "
             "mcxent}'");
  }
  return out;
}

}  // namespace dtrain::core
