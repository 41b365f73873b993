#pragma once
// Turns a ModelSpec into layers: one layer from its spec and the shapes it reads (make_layer),
// and the whole model through its graph (model_graph.h), checking that the shapes fit.
#include <memory>
#include <vector>

#include "core/layers/layer.h"
#include "core/spec/job_spec.h"
#include "core/util/error.h"

namespace dtrain::core {

// A layer that is wired wrongly or does not fit its input; says which layer so the spec parser
// can point at it.
class LayerError : public UserError {
 public:
  LayerError(size_t layer_index, const UserError& cause)
      : UserError(cause.what_happened(), cause.fix()), layer_index_(layer_index) {}
  size_t layer_index() const { return layer_index_; }

 private:
  size_t layer_index_;
};

// One layer reading inputs of `input_shapes` (one for every kind but add and concat). Throws
// UserError when they do not fit.
std::unique_ptr<Layer> make_layer(const ModelSpec& model, const LayerSpec& layer,
                                  const std::vector<Shape>& input_shapes);

// The model's layers in spec order (the order of their parameters).
std::vector<std::unique_ptr<Layer>> build_layers(const ModelSpec& spec);
inline void infer_layer_shapes(const ModelSpec& spec) { build_layers(spec); }

// Parameters and state values of the model the spec describes, without allocating them.
struct ModelCounts {
  int64_t params = 0, state = 0;
};
ModelCounts count_model(const ModelSpec& spec);

}  // namespace dtrain::core
