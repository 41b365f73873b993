#include "kernels/cuda/device_buffer.h"

#include "kernels/cuda/cuda_check.h"

namespace dtrain::kernels::cuda {

DeviceBuffer::~DeviceBuffer() {
  if (data_) cudaFree(data_);
}

void* DeviceBuffer::get(cudaStream_t s, size_t bytes) {
  if (bytes <= capacity_) return data_;
  if (data_) {
    DTRAIN_CUDA_CALL(cudaStreamSynchronize(s));
    DTRAIN_CUDA_CALL(cudaFree(data_));
    data_ = nullptr;
    capacity_ = 0;
  }
  DTRAIN_CUDA_CALL(cudaMalloc(&data_, bytes > 0 ? bytes : 1));
  capacity_ = bytes;
  return data_;
}

}  // namespace dtrain::kernels::cuda
