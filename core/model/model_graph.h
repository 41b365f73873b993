#pragma once
// A model's layers wired as a graph (docs/architecture/core.md, "Graph models"). Each layer
// reads the layer listed before it unless its `inputs` name others; add and concat read several.
// Parameters are laid out in the order the spec lists the layers; layers run in an order in
// which each follows its inputs (for a plain stack both are the spec's order).
#include <memory>
#include <vector>

#include "core/layers/layer.h"
#include "core/model/model_builder.h"
#include "core/spec/job_spec.h"

namespace dtrain::core {

// An index in ModelGraph::inputs that stands for the model's input.
inline constexpr int kModelInput = -1;

struct ModelGraph {
  std::vector<std::unique_ptr<Layer>> layers;  // spec order
  std::vector<std::vector<int>> inputs;        // per layer: what it reads, in `inputs` order
  std::vector<int> order;                      // every layer after its inputs; the output last
  std::vector<int> readers;                    // per layer: how many inputs read its output
};

// Throws LayerError naming the layer when an input is unknown, the layers form a cycle, a
// layer's output is never read, or a layer does not fit the shapes it reads.
ModelGraph build_graph(const ModelSpec& spec);

}  // namespace dtrain::core
