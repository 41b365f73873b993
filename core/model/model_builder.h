#pragma once
// Turns a ModelSpec into layers, checking that the shapes chain.
#include <memory>
#include <vector>

#include "core/layers/layer.h"
#include "core/spec/job_spec.h"
#include "core/util/error.h"

namespace dtrain::core {

// A layer that does not fit its input; says which layer so the spec parser can point at it.
class LayerShapeError : public UserError {
 public:
  LayerShapeError(size_t layer_index, const UserError& cause)
      : UserError(cause.what_happened(), cause.fix()), layer_index_(layer_index) {}
  size_t layer_index() const { return layer_index_; }

 private:
  size_t layer_index_;
};

std::vector<std::unique_ptr<Layer>> build_layers(const ModelSpec& spec);
inline void infer_layer_shapes(const ModelSpec& spec) { build_layers(spec); }

// Parameters and state values of the model the spec describes, without allocating them.
struct ModelCounts {
  int64_t params = 0, state = 0;
};
ModelCounts count_model(const ModelSpec& spec);

}  // namespace dtrain::core
