#pragma once
// Scratch device memory that grows as needed and is freed with its owner: converted operands
// of mixed precision, the batch-norm reductions' partial sums.
#include <cuda_runtime.h>

#include <cstddef>

namespace dtrain::kernels::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();
  // Room for `bytes`; waits for `s` before replacing a smaller buffer (queued kernels may
  // still use it).
  void* get(cudaStream_t s, size_t bytes);

 private:
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace dtrain::kernels::cuda
