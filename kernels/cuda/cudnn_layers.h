#pragma once
// Convolution and pooling through cuDNN 9 (its legacy, descriptor-based API), for one geometry
// each, on the backend's handle and stream.
#include <cudnn.h>

#include <memory>

#include "kernels/backend.h"

namespace dtrain::kernels::cuda {

// allow_tf32: tensor-core TF32 for the convolutions (CUDNN_DEFAULT_MATH); otherwise FMA only.
std::unique_ptr<Conv2dKernel> make_cudnn_conv2d(cudnnHandle_t handle, const ConvGeometry& g,
                                                bool allow_tf32);
std::unique_ptr<Pool2dKernel> make_cudnn_pool2d(cudnnHandle_t handle, const PoolGeometry& g);

}  // namespace dtrain::kernels::cuda
