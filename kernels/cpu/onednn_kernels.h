#pragma once
// Factories for the oneDNN kernels behind the CPU backend.
#include <memory>

#include "kernels/backend.h"

namespace dtrain::kernels::cpu {

std::unique_ptr<Conv2dKernel> make_onednn_conv2d(const ConvGeometry& geometry);
std::unique_ptr<Pool2dKernel> make_onednn_pool2d(const PoolGeometry& geometry);

}  // namespace dtrain::kernels::cpu
