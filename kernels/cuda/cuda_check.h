#pragma once
// Every CUDA, cuBLAS and cuDNN call is checked (docs/architecture/kernels.md, "Invariants"): a
// failure throws CudaError naming the call, the device and what to do. The trainer turns it into a
// failed job; the daemon stays up.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <stdexcept>
#include <string>

namespace dtrain::kernels::cuda {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The advice that goes with an error: what a user can change.
inline std::string cuda_fix(bool out_of_memory) {
  return out_of_memory
             ? "fix: lower training.batch_size (or batch_size_per_worker) or run fewer workers on this GPU"
             : "fix: check the GPU with nvidia-smi; if it persists run the job with "
               "training.device: cpu and report the message";
}

[[noreturn]] inline void throw_cuda_error(const char* call, const char* file, int line,
                                          const std::string& what, bool out_of_memory) {
  int device = -1;
  cudaGetDevice(&device);
  throw CudaError(std::string(call) + " failed on GPU " + std::to_string(device) + ": " + what +
                  " (" + file + ":" + std::to_string(line) + "); " + cuda_fix(out_of_memory));
}

inline const char* cublas_status_text(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "cuBLAS error";
  }
}

}  // namespace dtrain::kernels::cuda

#define DTRAIN_CUDA_CALL(call)                                                            \
  do {                                                                                   \
    const cudaError_t status_ = (call);                                                  \
    if (status_ != cudaSuccess)                                                          \
      ::dtrain::kernels::cuda::throw_cuda_error(#call, __FILE__, __LINE__,               \
                                                cudaGetErrorString(status_),             \
                                                status_ == cudaErrorMemoryAllocation);   \
  } while (0)

#define DTRAIN_CUBLAS_CALL(call)                                                          \
  do {                                                                                   \
    const cublasStatus_t status_ = (call);                                               \
    if (status_ != CUBLAS_STATUS_SUCCESS)                                                \
      ::dtrain::kernels::cuda::throw_cuda_error(                                         \
          #call, __FILE__, __LINE__, ::dtrain::kernels::cuda::cublas_status_text(status_), \
          status_ == CUBLAS_STATUS_ALLOC_FAILED);                                        \
  } while (0)

#define DTRAIN_CUDNN_CALL(call)                                                           \
  do {                                                                                   \
    const cudnnStatus_t status_ = (call);                                                \
    if (status_ != CUDNN_STATUS_SUCCESS)                                                 \
      ::dtrain::kernels::cuda::throw_cuda_error(#call, __FILE__, __LINE__,               \
                                                cudnnGetErrorString(status_),            \
                                                status_ == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED); \
  } while (0)

// After a kernel launch: a bad configuration shows up here, not at the next call.
#define DTRAIN_CUDA_LAUNCHED() DTRAIN_CUDA_CALL(cudaGetLastError())
