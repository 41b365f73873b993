// Batch normalisation and global pooling on the GPU (kernels/cuda/cuda_ops.h). Batch norm is
// ours rather than cuDNN's: the legacy cuDNN API is deprecated in cuDNN 9 and refuses an
// epsilon below 1e-5, which job specs may ask for; two passes per channel are all it needs.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"

namespace dtrain::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__device__ double block_sum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  const double total = shared[0];
  __syncthreads();
  return total;
}

// Element k of channel c over the batch: example k / plane, position k % plane.
__device__ __forceinline__ int64_t channel_index(const BatchNormArgs& a, int64_t c, int64_t k) {
  return (k / a.plane * a.channels + c) * a.plane + k % a.plane;
}

// One block per channel: the batch's mean and (biased) variance in double, two passes as on
// the CPU; moves the running statistics (variance unbiased) and saves mean and 1/std.
__global__ void bn_statistics_kernel(BatchNormArgs a) {
  __shared__ double shared[kThreads];
  const int64_t c = blockIdx.x, count = a.batch * a.plane;
  double sum = 0.0;
  for (int64_t k = threadIdx.x; k < count; k += kThreads) sum += a.x[channel_index(a, c, k)];
  const double mean = block_sum(sum, shared) / double(count);
  double sq = 0.0;
  for (int64_t k = threadIdx.x; k < count; k += kThreads) {
    const double d = a.x[channel_index(a, c, k)] - mean;
    sq += d * d;
  }
  const double var = block_sum(sq, shared) / double(count);
  if (threadIdx.x != 0) return;
  const double unbiased = count > 1 ? var * double(count) / double(count - 1) : var;
  a.running_mean[c] = a.decay * a.running_mean[c] + (1.f - a.decay) * float(mean);
  a.running_var[c] = a.decay * a.running_var[c] + (1.f - a.decay) * float(unbiased);
  a.save_mean[c] = float(mean);
  a.save_inv_std[c] = 1.f / sqrtf(float(var) + a.eps);
}

__global__ void bn_running_kernel(BatchNormArgs a) {
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < a.channels;
       c += int64_t(gridDim.x) * blockDim.x) {
    a.save_mean[c] = a.running_mean[c];
    a.save_inv_std[c] = 1.f / sqrtf(a.running_var[c] + a.eps);
  }
}

__global__ void bn_normalize_kernel(BatchNormArgs a) {
  const int64_t n = a.batch * a.channels * a.plane;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = (i / a.plane) % a.channels;
    a.y[i] = a.gamma[c] * ((a.x[i] - a.save_mean[c]) * a.save_inv_std[c]) + a.beta[c];
  }
}

// One block per channel: dgamma = sum dy * xhat, dbeta = sum dy.
__global__ void bn_parameter_gradients_kernel(BatchNormArgs a) {
  __shared__ double shared[kThreads];
  const int64_t c = blockIdx.x, count = a.batch * a.plane;
  const float mean = a.save_mean[c], inv_std = a.save_inv_std[c];
  double dg = 0.0, db = 0.0;
  for (int64_t k = threadIdx.x; k < count; k += kThreads) {
    const int64_t i = channel_index(a, c, k);
    dg += a.dy[i] * ((a.x[i] - mean) * inv_std);
    db += a.dy[i];
  }
  dg = block_sum(dg, shared);
  db = block_sum(db, shared);
  if (threadIdx.x == 0) {
    a.dgamma[c] = float(dg);
    a.dbeta[c] = float(db);
  }
}

__global__ void bn_input_gradient_kernel(BatchNormArgs a) {
  const int64_t n = a.batch * a.channels * a.plane;
  const float count = float(a.batch * a.plane);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = (i / a.plane) % a.channels;
    const float inv_std = a.save_inv_std[c], scale = a.gamma[c] * inv_std;
    if (!a.training) {
      a.dx[i] = scale * a.dy[i];
      continue;
    }
    const float xhat = (a.x[i] - a.save_mean[c]) * inv_std;
    a.dx[i] = scale * (a.dy[i] - a.dbeta[c] / count - xhat * (a.dgamma[c] / count));
  }
}

// One warp per plane.
__global__ void global_pool_kernel(const float* in, float* out, int64_t planes, int64_t plane,
                                   bool max) {
  const int64_t p = int64_t(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (p >= planes) return;
  const float* x = in + p * plane;
  float v = max ? -INFINITY : 0.f;
  for (int64_t j = lane; j < plane; j += 32) v = max ? fmaxf(v, x[j]) : v + x[j];
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = max ? fmaxf(v, other) : v + other;
  }
  if (lane == 0) out[p] = max ? v : v / float(plane);
}

// One thread per plane: max needs the first maximum, as on the CPU, so it scans in order.
__global__ void global_pool_backward_kernel(const float* in, const float* dout, float* din,
                                            int64_t planes, int64_t plane, bool max) {
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < planes;
       p += int64_t(gridDim.x) * blockDim.x) {
    const float* x = in + p * plane;
    float* d = din + p * plane;
    if (max) {
      int64_t best = 0;
      for (int64_t j = 1; j < plane; ++j)
        if (x[j] > x[best]) best = j;
      for (int64_t j = 0; j < plane; ++j) d[j] = j == best ? dout[p] : 0.f;
    } else {
      const float g = dout[p] / float(plane);
      for (int64_t j = 0; j < plane; ++j) d[j] = g;
    }
  }
}

}  // namespace

void batch_norm_forward(cudaStream_t s, const BatchNormArgs& a) {
  const int64_t n = a.batch * a.channels * a.plane;
  if (n <= 0) return;
  if (a.training)
    bn_statistics_kernel<<<unsigned(a.channels), kThreads, 0, s>>>(a);
  else
    bn_running_kernel<<<grid_for(a.channels), kThreads, 0, s>>>(a);
  DTRAIN_CUDA_LAUNCHED();
  bn_normalize_kernel<<<grid_for(n), kThreads, 0, s>>>(a);
  DTRAIN_CUDA_LAUNCHED();
}

void batch_norm_backward(cudaStream_t s, const BatchNormArgs& a) {
  const int64_t n = a.batch * a.channels * a.plane;
  if (n <= 0) return;
  bn_parameter_gradients_kernel<<<unsigned(a.channels), kThreads, 0, s>>>(a);
  DTRAIN_CUDA_LAUNCHED();
  if (!a.dx) return;
  bn_input_gradient_kernel<<<grid_for(n), kThreads, 0, s>>>(a);
  DTRAIN_CUDA_LAUNCHED();
}

void global_pool_forward(cudaStream_t s, const float* in, float* out, int64_t planes,
                         int64_t plane, bool max) {
  if (planes <= 0) return;
  const unsigned blocks = unsigned((planes + kThreads / 32 - 1) / (kThreads / 32));
  global_pool_kernel<<<blocks, kThreads, 0, s>>>(in, out, planes, plane, max);
  DTRAIN_CUDA_LAUNCHED();
}

void global_pool_backward(cudaStream_t s, const float* in, const float* dout, float* din,
                          int64_t planes, int64_t plane, bool max) {
  if (planes <= 0) return;
  global_pool_backward_kernel<<<grid_for(planes), kThreads, 0, s>>>(in, dout, din, planes, plane,
                                                                    max);
  DTRAIN_CUDA_LAUNCHED();
}

}  // namespace dtrain::kernels::cuda
