#pragma once
// Mixed precision on the GPU (kernels/README.md, "Mixed precision"): fp32 tensors are converted
// to bf16/fp16 right before a cuBLAS product or a cuDNN convolution and the results come back in
// fp32, so everything else (activations, parameters, gradients, updaters, the codec) stays fp32.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/op_args.h"

namespace dtrain::kernels::cuda {

// x[0, n) fp32 -> out in `p` (2 bytes per element), round to nearest even.
void to_reduced(cudaStream_t s, Precision p, const float* x, void* out, int64_t n);
// x[0, n) in `p` -> fp32.
void from_reduced(cudaStream_t s, Precision p, const void* x, float* out, int64_t n);

// Device memory for converted operands that grows as needed and is freed with its owner.
class ReducedBuffer {
 public:
  ReducedBuffer() = default;
  ReducedBuffer(const ReducedBuffer&) = delete;
  ReducedBuffer& operator=(const ReducedBuffer&) = delete;
  ~ReducedBuffer();
  // Room for n 2-byte elements; waits for `s` before replacing a smaller buffer (queued
  // kernels may still read it).
  void* get(cudaStream_t s, int64_t n);

 private:
  void* data_ = nullptr;
  int64_t capacity_ = 0;
};

}  // namespace dtrain::kernels::cuda
