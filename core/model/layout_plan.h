#pragma once
// Which layers keep their output channel-blocked (kernels/op_args.h;
// docs/architecture/kernels.md, "Layouts"), so no reorder runs between a convolution and the
// layers around it.
// A layer's output is blocked when the backend wants a block (Backend::activation_block), the
// layer can write it (Layer::blocking), its channels are a multiple of the block, and every
// layer reading it can read it. Layers that keep their input's layout (batch norm, add) are
// planned together with their inputs: all blocked or all plain. The model's input and output
// stay plain.
#include <cstdint>
#include <vector>

#include "core/model/model_graph.h"

namespace dtrain::core {

// Per layer: the channel block of its output, 0 for plain.
std::vector<int64_t> plan_output_blocks(const ModelGraph& graph, int64_t block);

}  // namespace dtrain::core
