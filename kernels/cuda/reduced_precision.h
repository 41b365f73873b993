#pragma once
// Mixed precision on the GPU (docs/architecture/kernels.md, "Mixed precision"): fp32 tensors are
// converted to bf16/fp16 right before a cuBLAS product or a cuDNN convolution and the results come
// back in fp32, so everything else (activations, parameters, gradients, updaters, the codec) stays
// fp32.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/op_args.h"

namespace dtrain::kernels::cuda {

// x[0, n) fp32 -> out in `p` (2 bytes per element), round to nearest even.
void to_reduced(cudaStream_t s, Precision p, const float* x, void* out, int64_t n);
// x[0, n) in `p` -> fp32.
void from_reduced(cudaStream_t s, Precision p, const void* x, float* out, int64_t n);

// Bytes of n converted elements (DeviceBuffer::get).
inline size_t reduced_bytes(int64_t n) { return size_t(n > 0 ? n : 0) * 2; }

}  // namespace dtrain::kernels::cuda
