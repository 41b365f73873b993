#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/reduced_precision.h"

namespace dtrain::kernels::cuda {
namespace {

// One conversion over x[0, n), grid-stride.
template <typename From, typename To, typename Convert>
__global__ void convert(const From* x, To* out, int64_t n, Convert op) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = op(x[i]);
}

struct ToBf16 {
  __device__ __nv_bfloat16 operator()(float v) const { return __float2bfloat16_rn(v); }
};
struct ToFp16 {
  __device__ __half operator()(float v) const { return __float2half_rn(v); }
};
struct FromBf16 {
  __device__ float operator()(__nv_bfloat16 v) const { return __bfloat162float(v); }
};
struct FromFp16 {
  __device__ float operator()(__half v) const { return __half2float(v); }
};

}  // namespace

void to_reduced(cudaStream_t s, Precision p, const float* x, void* out, int64_t n) {
  if (n <= 0) return;
  if (p == Precision::kBf16)
    convert<<<grid_for(n), 256, 0, s>>>(x, static_cast<__nv_bfloat16*>(out), n, ToBf16{});
  else
    convert<<<grid_for(n), 256, 0, s>>>(x, static_cast<__half*>(out), n, ToFp16{});
  DTRAIN_CUDA_LAUNCHED();
}

void from_reduced(cudaStream_t s, Precision p, const void* x, float* out, int64_t n) {
  if (n <= 0) return;
  if (p == Precision::kBf16)
    convert<<<grid_for(n), 256, 0, s>>>(static_cast<const __nv_bfloat16*>(x), out, n, FromBf16{});
  else
    convert<<<grid_for(n), 256, 0, s>>>(static_cast<const __half*>(x), out, n, FromFp16{});
  DTRAIN_CUDA_LAUNCHED();
}

}  // namespace dtrain::kernels::cuda
