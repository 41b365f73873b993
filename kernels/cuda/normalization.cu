// Batch normalisation, per-channel sums and biases (convolutions) and global pooling on the GPU
// (kernels/cuda/cuda_ops.h). Batch norm is ours rather than cuDNN's: the legacy cuDNN API is
// deprecated in cuDNN 9 and refuses an epsilon below 1e-5, which job specs may ask for.
#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"

namespace dtrain::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// Batch-norm statistics are sums over each channel's batch * plane elements. One block per
// channel left most of a large GPU idle (16 channels: 16 blocks), so each channel is cut into
// slices of whole examples, one block per (slice, channel), each writing its partial sums to
// scratch; a second kernel adds a channel's slices in a fixed order (deterministic, no atomics).
// Sums are in double, so the one-pass variance E[x^2] - mean^2 loses nothing that matters.
constexpr int kBlocksWanted = 1024;
constexpr int64_t kElementsPerBlock = 2048;  // at least, so a block is worth its launch

int64_t slices_for(const BatchNormArgs& a) {
  int64_t slices = std::max<int64_t>(1, kBlocksWanted / std::max<int64_t>(a.channels, 1));
  slices = std::min(slices, a.batch);
  slices = std::min(slices, std::max<int64_t>(1, a.batch * a.plane / kElementsPerBlock));
  return std::max<int64_t>(slices, 1);
}

// Room for two partial sums per (slice, channel).
double* partials(cudaStream_t s, DeviceBuffer& scratch, int64_t slices, int64_t channels) {
  return static_cast<double*>(scratch.get(s, sizeof(double) * 2 * size_t(slices * channels)));
}

// Two doubles summed over the block; thread 0 gets the totals.
__device__ void block_sum2(double& u, double& v) {
  __shared__ double su[kThreads / 32], sv[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) {
    u += __shfl_xor_sync(0xffffffffu, u, o);
    v += __shfl_xor_sync(0xffffffffu, v, o);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    su[warp] = u;
    sv[warp] = v;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) {
      su[0] += su[w];
      sv[0] += sv[w];
    }
    u = su[0];
    v = sv[0];
  }
}

// The block's two sums as slice blockIdx.x's partials of channel c (thread 0 holds them).
__device__ void store_partials(double* partial, int64_t c, int64_t slices, double u, double v) {
  if (threadIdx.x != 0) return;
  partial[2 * (c * slices + blockIdx.x)] = u;
  partial[2 * (c * slices + blockIdx.x) + 1] = v;
}

// Channel c's two totals over its slices, added in slice order.
__device__ void add_partials(const double* partial, int64_t c, int64_t slices, double& u,
                             double& v) {
  u = 0.0;
  v = 0.0;
  for (int64_t s = 0; s < slices; ++s) {
    u += partial[2 * (c * slices + s)];
    v += partial[2 * (c * slices + s) + 1];
  }
}

// The examples [first, last) of slice blockIdx.x, channel blockIdx.y; element k of the slice is
// example first + k / plane, position k % plane (32-bit: a slice is far below 2^31 elements).
struct Slice {
  int64_t first, last;
  __device__ Slice(const BatchNormArgs& a, int64_t slices) {
    const int64_t per = (a.batch + slices - 1) / slices;
    first = min(a.batch, int64_t(blockIdx.x) * per);
    last = min(a.batch, first + per);
  }
  __device__ int64_t count(const BatchNormArgs& a) const { return (last - first) * a.plane; }
  __device__ int64_t index(const BatchNormArgs& a, int64_t c, uint32_t k) const {
    const uint32_t plane = uint32_t(a.plane);
    return ((first + k / plane) * a.channels + c) * a.plane + k % plane;
  }
};

// Partial sum and sum of squares of x.
__global__ void bn_partial_moments_kernel(BatchNormArgs a, int64_t slices, double* partial) {
  const int64_t c = blockIdx.y;
  const Slice slice(a, slices);
  const uint32_t count = uint32_t(slice.count(a));
  double sum = 0.0, sq = 0.0;
  for (uint32_t k = threadIdx.x; k < count; k += kThreads) {
    const double v = a.x[slice.index(a, c, k)];
    sum += v;
    sq += v * v;
  }
  block_sum2(sum, sq);
  store_partials(partial, c, slices, sum, sq);
}

// Per channel: the batch's mean and (biased) variance; moves the running statistics
// (variance unbiased) and saves mean and 1/std.
__global__ void bn_finish_moments_kernel(BatchNormArgs a, int64_t slices, const double* partial) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= a.channels) return;
  double sum, sq;
  add_partials(partial, c, slices, sum, sq);
  const double count = double(a.batch * a.plane);
  const double mean = sum / count;
  const double var = fmax(sq / count - mean * mean, 0.0);
  const double unbiased = count > 1 ? var * count / (count - 1) : var;
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

// The channel of flat element i; Index is uint32_t whenever the tensor allows (64-bit division
// costs several times more on a GPU).
template <typename Index>
__device__ __forceinline__ Index channel_of(Index i, Index plane, Index channels) {
  return (i / plane) % channels;
}

template <typename Index>
__global__ void bn_normalize_kernel(BatchNormArgs a) {
  const Index n = Index(a.batch * a.channels * a.plane), plane = Index(a.plane),
              channels = Index(a.channels);
  for (Index i = Index(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += Index(gridDim.x) * blockDim.x) {
    const Index c = channel_of(i, plane, channels);
    a.y[i] = a.gamma[c] * ((a.x[i] - a.save_mean[c]) * a.save_inv_std[c]) + a.beta[c];
  }
}

// Partial dgamma = sum dy * xhat and dbeta = sum dy.
__global__ void bn_partial_gradients_kernel(BatchNormArgs a, int64_t slices, double* partial) {
  const int64_t c = blockIdx.y;
  const Slice slice(a, slices);
  const uint32_t count = uint32_t(slice.count(a));
  const float mean = a.save_mean[c], inv_std = a.save_inv_std[c];
  double dg = 0.0, db = 0.0;
  for (uint32_t k = threadIdx.x; k < count; k += kThreads) {
    const int64_t i = slice.index(a, c, k);
    dg += a.dy[i] * ((a.x[i] - mean) * inv_std);
    db += a.dy[i];
  }
  block_sum2(dg, db);
  store_partials(partial, c, slices, dg, db);
}

__global__ void bn_finish_gradients_kernel(BatchNormArgs a, int64_t slices,
                                           const double* partial) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= a.channels) return;
  double dg, db;
  add_partials(partial, c, slices, dg, db);
  a.dgamma[c] = float(dg);
  a.dbeta[c] = float(db);
}

template <typename Index>
__global__ void bn_input_gradient_kernel(BatchNormArgs a) {
  const Index n = Index(a.batch * a.channels * a.plane), plane = Index(a.plane),
              channels = Index(a.channels);
  const float count = float(a.batch * a.plane);
  for (Index i = Index(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += Index(gridDim.x) * blockDim.x) {
    const Index c = channel_of(i, plane, channels);
    const float inv_std = a.save_inv_std[c], scale = a.gamma[c] * inv_std;
    if (!a.training) {
      a.dx[i] = scale * a.dy[i];
      continue;
    }
    const float xhat = (a.x[i] - a.save_mean[c]) * inv_std;
    a.dx[i] = scale * (a.dy[i] - a.dbeta[c] / count - xhat * (a.dgamma[c] / count));
  }
}

// sums[c] = the channel's total (the first of each slice's two partials).
__global__ void finish_channel_sums_kernel(int64_t channels, int64_t slices,
                                           const double* partial, float* sums) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  double sum, unused;
  add_partials(partial, c, slices, sum, unused);
  sums[c] = float(sum);
}

template <typename Index>
__global__ void add_channel_bias_kernel(float* x, const float* bias, Index n, Index plane,
                                        Index channels) {
  for (Index i = Index(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += Index(gridDim.x) * blockDim.x)
    x[i] += bias[channel_of(i, plane, channels)];
}

bool fits_32_bits(int64_t n) { return n < (int64_t(1) << 31); }

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

void batch_norm_forward(cudaStream_t s, const BatchNormArgs& a, DeviceBuffer& scratch) {
  const int64_t n = a.batch * a.channels * a.plane;
  if (n <= 0) return;
  if (a.training) {
    const int64_t slices = slices_for(a);
    double* partial = partials(s, scratch, slices, a.channels);
    bn_partial_moments_kernel<<<dim3(unsigned(slices), unsigned(a.channels)), kThreads, 0, s>>>(
        a, slices, partial);
    DTRAIN_CUDA_LAUNCHED();
    bn_finish_moments_kernel<<<grid_for(a.channels), kThreads, 0, s>>>(a, slices, partial);
  } else {
    bn_running_kernel<<<grid_for(a.channels), kThreads, 0, s>>>(a);
  }
  DTRAIN_CUDA_LAUNCHED();
  if (fits_32_bits(n))
    bn_normalize_kernel<uint32_t><<<grid_for(n), kThreads, 0, s>>>(a);
  else
    bn_normalize_kernel<int64_t><<<grid_for(n), kThreads, 0, s>>>(a);
  DTRAIN_CUDA_LAUNCHED();
}

void batch_norm_backward(cudaStream_t s, const BatchNormArgs& a, DeviceBuffer& scratch) {
  const int64_t n = a.batch * a.channels * a.plane;
  if (n <= 0) return;
  const int64_t slices = slices_for(a);
  double* partial = partials(s, scratch, slices, a.channels);
  bn_partial_gradients_kernel<<<dim3(unsigned(slices), unsigned(a.channels)), kThreads, 0, s>>>(
      a, slices, partial);
  DTRAIN_CUDA_LAUNCHED();
  bn_finish_gradients_kernel<<<grid_for(a.channels), kThreads, 0, s>>>(a, slices, partial);
  DTRAIN_CUDA_LAUNCHED();
  if (!a.dx) return;
  if (fits_32_bits(n))
    bn_input_gradient_kernel<uint32_t><<<grid_for(n), kThreads, 0, s>>>(a);
  else
    bn_input_gradient_kernel<int64_t><<<grid_for(n), kThreads, 0, s>>>(a);
  DTRAIN_CUDA_LAUNCHED();
}

void channel_sums(cudaStream_t s, const float* x, int64_t batch, int64_t channels, int64_t plane,
                  float* sums, DeviceBuffer& scratch) {
  if (channels <= 0) return;
  BatchNormArgs shape;  // only the layout and x: the moments kernel reads nothing else
  shape.batch = batch;
  shape.channels = channels;
  shape.plane = plane;
  shape.x = x;
  const int64_t slices = slices_for(shape);
  double* partial = partials(s, scratch, slices, channels);
  bn_partial_moments_kernel<<<dim3(unsigned(slices), unsigned(channels)), kThreads, 0, s>>>(
      shape, slices, partial);
  DTRAIN_CUDA_LAUNCHED();
  finish_channel_sums_kernel<<<grid_for(channels), kThreads, 0, s>>>(channels, slices, partial,
                                                                     sums);
  DTRAIN_CUDA_LAUNCHED();
}

void add_channel_bias(cudaStream_t s, float* x, const float* bias, int64_t batch,
                      int64_t channels, int64_t plane) {
  const int64_t n = batch * channels * plane;
  if (n <= 0) return;
  if (fits_32_bits(n))
    add_channel_bias_kernel<uint32_t><<<grid_for(n), kThreads, 0, s>>>(
        x, bias, uint32_t(n), uint32_t(plane), uint32_t(channels));
  else
    add_channel_bias_kernel<int64_t><<<grid_for(n), kThreads, 0, s>>>(x, bias, n, plane, channels);
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
