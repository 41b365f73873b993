#include "core/model/layout_plan.h"

#include <numeric>

namespace dtrain::core {
namespace {

// Groups of layers whose outputs share one layout (a layer that keeps its input's layout joins
// its inputs' group).
class LayoutGroups {
 public:
  explicit LayoutGroups(size_t n) : parent_(n) { std::iota(parent_.begin(), parent_.end(), 0); }
  size_t find(size_t i) {
    while (parent_[i] != i) i = parent_[i] = parent_[parent_[i]];
    return i;
  }
  void join(size_t a, size_t b) { parent_[find(a)] = find(b); }

 private:
  std::vector<size_t> parent_;
};

bool can_write_blocked(const Layer& layer, int64_t block) {
  const Shape& out = layer.output_shape();
  return layer.blocking() != Layer::Blocking::kNone && out.size() == 3 && out[0] % block == 0;
}

}  // namespace

std::vector<int64_t> plan_output_blocks(const ModelGraph& graph, int64_t block) {
  const size_t n = graph.layers.size();
  std::vector<int64_t> blocks(n, 0);
  if (block <= 0) return blocks;
  LayoutGroups groups(n);
  std::vector<bool> possible(n);
  for (size_t i = 0; i < n; ++i) possible[i] = can_write_blocked(*graph.layers[i], block);
  for (size_t i = 0; i < n; ++i) {
    const bool keeps = graph.layers[i]->blocking() == Layer::Blocking::kPreserves;
    for (int j : graph.inputs[i]) {
      if (j == kModelInput) {
        if (keeps) possible[i] = false;  // the model's input is plain
        continue;
      }
      if (keeps) groups.join(i, size_t(j));
      // A reader that cannot read blocked input keeps its input plain.
      if (graph.layers[i]->blocking() == Layer::Blocking::kNone) possible[size_t(j)] = false;
    }
  }
  std::vector<bool> group_possible(n, true);
  for (size_t i = 0; i < n; ++i)
    if (!possible[i]) group_possible[groups.find(i)] = false;
  for (size_t i = 0; i < n; ++i)
    if (group_possible[groups.find(i)]) blocks[i] = block;
  return blocks;
}

}  // namespace dtrain::core
