#pragma once
// Convolution and pooling through cuDNN 9 (its legacy, descriptor-based API), for one geometry
// each, on the backend's handle and stream.
#include <cudnn.h>

#include <memory>

#include "kernels/backend.h"

namespace dtrain::kernels::cuda {

// allow_tf32: tensor-core TF32 for the fp32 convolutions (CUDNN_DEFAULT_MATH); otherwise FMA
// only. precision bf16/fp16: inputs converted, the convolution in that type on tensor cores
// with fp32 accumulation, results converted back (kernels/cuda/reduced_precision.h).
std::unique_ptr<Conv2dKernel> make_cudnn_conv2d(cudnnHandle_t handle, const ConvGeometry& g,
                                                bool allow_tf32,
                                                Precision precision = Precision::kFp32);
std::unique_ptr<Pool2dKernel> make_cudnn_pool2d(cudnnHandle_t handle, const PoolGeometry& g);

}  // namespace dtrain::kernels::cuda
