#include "core/model/model_graph.h"

#include <map>
#include <string>

#include "core/spec/spec_reader.h"

namespace dtrain::core {
namespace {

std::string label(const ModelSpec& spec, int i) {
  const LayerSpec& l = spec.layers[static_cast<size_t>(i)];
  return l.name.empty() ? "model.layers[" + std::to_string(i) + "]" : "'" + l.name + "'";
}

// The layer an error is about, which the parser's "model.layers[i]: " prefix already places:
// "layer 'name'", or "this layer" for an unnamed one.
std::string subject(const ModelSpec& spec, int i) {
  const LayerSpec& l = spec.layers[static_cast<size_t>(i)];
  return l.name.empty() ? "this layer" : "layer '" + l.name + "'";
}

LayerError wiring_error(int i, const std::string& what, const std::string& fix) {
  return LayerError(static_cast<size_t>(i), UserError(what, fix));
}

// Names -> indices; a layer without `inputs` reads the one before it.
std::vector<std::vector<int>> resolve_inputs(const ModelSpec& spec) {
  std::map<std::string, int> by_name;
  std::vector<std::string> names{kModelInputName};
  for (size_t i = 0; i < spec.layers.size(); ++i)
    if (!spec.layers[i].name.empty()) {
      by_name[spec.layers[i].name] = static_cast<int>(i);
      names.push_back(spec.layers[i].name);
    }
  std::vector<std::vector<int>> inputs(spec.layers.size());
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerSpec& l = spec.layers[i];
    if (l.inputs.empty()) inputs[i].push_back(static_cast<int>(i) - 1);  // -1: kModelInput
    for (const std::string& name : l.inputs) {
      if (name == kModelInputName) {
        inputs[i].push_back(kModelInput);
        continue;
      }
      auto it = by_name.find(name);
      if (it == by_name.end()) {
        const std::string near = closest(name, names);
        throw wiring_error(static_cast<int>(i),
                           subject(spec, static_cast<int>(i)) + " reads '" + name +
                               "', but no layer has that name",
                           (near.empty() ? "" : "did you mean '" + near + "'? ") +
                               "inputs name layers (their 'name:') or 'input'");
      }
      inputs[i].push_back(it->second);
    }
  }
  return inputs;
}

// A cycle among the layers not yet placed, as "a -> b -> a" (each reads the next).
std::string describe_cycle(const ModelSpec& spec, const std::vector<std::vector<int>>& inputs,
                           const std::vector<bool>& placed, int start) {
  std::vector<int> path;
  std::vector<int> seen_at(spec.layers.size(), -1);
  int at = start;
  while (seen_at[static_cast<size_t>(at)] < 0) {
    seen_at[static_cast<size_t>(at)] = static_cast<int>(path.size());
    path.push_back(at);
    for (int j : inputs[static_cast<size_t>(at)])
      if (j != kModelInput && !placed[static_cast<size_t>(j)]) {
        at = j;
        break;
      }
  }
  std::string s;
  for (size_t k = static_cast<size_t>(seen_at[static_cast<size_t>(at)]); k < path.size(); ++k)
    s += label(spec, path[k]) + " -> ";
  return s + label(spec, at);
}

// Kahn's algorithm, taking the lowest spec index that is ready: a plain stack keeps its order.
std::vector<int> execution_order(const ModelSpec& spec,
                                 const std::vector<std::vector<int>>& inputs) {
  const size_t n = spec.layers.size();
  std::vector<bool> placed(n, false);
  std::vector<int> order;
  while (order.size() < n) {
    int next = -1;
    for (size_t i = 0; i < n && next < 0; ++i) {
      if (placed[i]) continue;
      bool ready = true;
      for (int j : inputs[i]) ready = ready && (j == kModelInput || placed[static_cast<size_t>(j)]);
      if (ready) next = static_cast<int>(i);
    }
    if (next < 0) {
      int first = 0;
      while (placed[static_cast<size_t>(first)]) ++first;
      throw wiring_error(first, "layers form a cycle: " + describe_cycle(spec, inputs, placed, first),
                         "a layer may only read layers that do not (directly or not) read it");
    }
    placed[static_cast<size_t>(next)] = true;
    order.push_back(next);
  }
  return order;
}

std::vector<int> count_readers(const ModelSpec& spec, const std::vector<std::vector<int>>& inputs) {
  std::vector<int> readers(spec.layers.size(), 0);
  for (const auto& in : inputs)
    for (int j : in)
      if (j != kModelInput) ++readers[static_cast<size_t>(j)];
  for (size_t i = 0; i + 1 < readers.size(); ++i)
    if (readers[i] == 0)
      throw wiring_error(static_cast<int>(i),
                         "the output of " + subject(spec, static_cast<int>(i)) +
                             " is not read by any layer",
                         "name it in a later layer's inputs, or remove it");
  if (readers.back() != 0)
    throw wiring_error(static_cast<int>(readers.size() - 1),
                       "the output layer's output is read by another layer",
                       "the output layer ends the model: read the layer before it instead");
  return readers;
}

}  // namespace

ModelGraph build_graph(const ModelSpec& spec) {
  ModelGraph g;
  g.inputs = resolve_inputs(spec);
  g.order = execution_order(spec, g.inputs);
  g.readers = count_readers(spec, g.inputs);
  g.layers.resize(spec.layers.size());
  for (int i : g.order) {
    std::vector<Shape> shapes;
    for (int j : g.inputs[static_cast<size_t>(i)])
      shapes.push_back(j == kModelInput ? spec.input : g.layers[static_cast<size_t>(j)]->output_shape());
    try {
      g.layers[static_cast<size_t>(i)] = make_layer(spec, spec.layers[static_cast<size_t>(i)], shapes);
    } catch (const UserError& e) {
      const std::string& name = spec.layers[static_cast<size_t>(i)].name;
      throw LayerError(static_cast<size_t>(i),
                       UserError(name.empty() ? e.what_happened()
                                              : "layer '" + name + "': " + e.what_happened(),
                                 e.fix()));
    }
  }
  return g;
}

}  // namespace dtrain::core
