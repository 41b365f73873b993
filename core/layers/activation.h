#pragma once
// Activation functions, applied in place over [rows, cols] (softmax normalises each row).
// Backward is expressed through the activation's output, which every layer keeps anyway.
#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::core {

enum class Activation { kIdentity, kRelu, kLeakyRelu, kTanh, kSigmoid, kSoftmax };

constexpr float kLeakyReluSlope = 0.01f;

// Throws UserError listing the valid names.
Activation parse_activation(const std::string& name);
std::string activation_name(Activation activation);
const std::vector<std::string>& activation_names();

// z -> a, in place.
void activation_forward(Activation activation, float* x, int64_t rows, int64_t cols);
// d(loss)/d(a) -> d(loss)/d(z), in place, from the outputs a.
void activation_backward(Activation activation, const float* a, float* d, int64_t rows,
                         int64_t cols);

}  // namespace dtrain::core
