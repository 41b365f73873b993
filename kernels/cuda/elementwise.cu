// Elementwise kernels, activations, losses and dropout on the GPU (kernels/cuda/cuda_ops.h).
// Grid-stride loops; softmax and its backward take one warp per row.
#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/random_bits.h"

namespace dtrain::kernels::cuda {
namespace {

constexpr int kThreads = 256;

#define GRID_STRIDE(i, n) \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

__global__ void fill_kernel(float* x, int64_t n, float v) { GRID_STRIDE(i, n) x[i] = v; }

__global__ void add_row_vector_kernel(float* x, const float* v, int64_t rows, int64_t cols) {
  GRID_STRIDE(i, rows * cols) x[i] += v[i % cols];
}

// One thread per column, walking down the rows: neighbouring threads read neighbouring floats.
__global__ void column_sums_kernel(const float* x, int64_t rows, int64_t cols, float* sums) {
  GRID_STRIDE(c, cols) {
    float sum = 0.f;
    for (int64_t r = 0; r < rows; ++r) sum += x[r * cols + c];
    sums[c] = sum;
  }
}

__global__ void axpy_kernel(float alpha, const float* x, float* y, int64_t n) {
  GRID_STRIDE(i, n) y[i] += alpha * x[i];
}

__global__ void multiply_kernel(const float* a, const float* b, float* out, int64_t n) {
  GRID_STRIDE(i, n) out[i] = a[i] * b[i];
}

__global__ void scale_kernel(float* x, int64_t n, float alpha) { GRID_STRIDE(i, n) x[i] *= alpha; }

__global__ void sum_squares_kernel(const float* x, int64_t n, double* total) {
  __shared__ double block_sum[kThreads];
  double sum = 0.0;
  GRID_STRIDE(i, n) sum += double(x[i]) * double(x[i]);
  block_sum[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) block_sum[threadIdx.x] += block_sum[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(total, block_sum[0]);
}

__global__ void clear_sparse_kernel(const uint32_t* words, int64_t count, float* x) {
  GRID_STRIDE(k, count) x[words[k] & 0x7FFFFFFFu] = 0.f;
}

__global__ void clear_bitmap_kernel(const uint32_t* bitmap, int64_t n, float* x) {
  GRID_STRIDE(i, n) if ((bitmap[i / 16] >> (2 * (i % 16))) & 3u) x[i] = 0.f;
}

__device__ __forceinline__ float activate(Activation act, float x) {
  switch (act) {
    case Activation::kRelu: return x > 0.f ? x : 0.f;
    case Activation::kLeakyRelu: return x > 0.f ? x : kLeakyReluSlope * x;
    case Activation::kTanh: return tanhf(x);
    case Activation::kSigmoid: return 1.f / (1.f + expf(-x));
    default: return x;
  }
}

__device__ __forceinline__ float activate_backward(Activation act, float a, float d) {
  switch (act) {
    case Activation::kRelu: return a > 0.f ? d : 0.f;
    case Activation::kLeakyRelu: return a > 0.f ? d : kLeakyReluSlope * d;
    case Activation::kTanh: return d * (1.f - a * a);
    case Activation::kSigmoid: return d * a * (1.f - a);
    default: return d;
  }
}

__global__ void activation_forward_kernel(Activation act, float* x, int64_t n) {
  GRID_STRIDE(i, n) x[i] = activate(act, x[i]);
}

__global__ void activation_backward_kernel(Activation act, const float* a, float* d, int64_t n) {
  GRID_STRIDE(i, n) d[i] = activate_backward(act, a[i], d[i]);
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One warp per row (8 rows per block of 256 threads).
__global__ void softmax_kernel(float* x, int64_t rows, int64_t cols) {
  const int64_t row = int64_t(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  float* r = x + row * cols;
  float max = -INFINITY;
  for (int64_t c = lane; c < cols; c += 32) max = fmaxf(max, r[c]);
  max = warp_max(max);
  float sum = 0.f;
  for (int64_t c = lane; c < cols; c += 32) sum += (r[c] = expf(r[c] - max));
  const float inv = 1.f / warp_sum(sum);
  for (int64_t c = lane; c < cols; c += 32) r[c] *= inv;
}

// dz_c = a_c * (d_c - sum_k d_k a_k), one warp per row.
__global__ void softmax_backward_kernel(const float* a, float* d, int64_t rows, int64_t cols) {
  const int64_t row = int64_t(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float* ar = a + row * cols;
  float* dr = d + row * cols;
  float dot = 0.f;
  for (int64_t c = lane; c < cols; c += 32) dot += dr[c] * ar[c];
  dot = warp_sum(dot);
  for (int64_t c = lane; c < cols; c += 32) dr[c] = ar[c] * (dr[c] - dot);
}

__device__ __forceinline__ float clamp_prob(float p) {
  return fminf(fmaxf(p, kProbFloor), 1.f - kProbFloor);
}

// Loss terms summed per block in double, then one atomicAdd per block; dz alongside.
__global__ void loss_kernel(LossArgs args, bool fused, double* total) {
  __shared__ double block_sum[kThreads];
  const int64_t n = args.rows * args.cols;
  const float inv_rows = 1.f / float(args.rows);
  double sum = 0.0;
  GRID_STRIDE(i, n) {
    const float a = args.a[i], y = args.targets[i];
    switch (args.loss) {
      case Loss::kMcxent:
        if (y != 0.f) sum -= double(y) * double(logf(clamp_prob(a)));
        break;
      case Loss::kXent:
        sum -= double(y) * double(logf(clamp_prob(a))) +
               (1.0 - double(y)) * double(logf(1.f - clamp_prob(a)));
        break;
      case Loss::kMse:
        sum += (double(a) - y) * (double(a) - y) / double(args.cols);
        break;
    }
    if (!args.dz) continue;
    float d;
    if (fused) {
      d = (a - y) * inv_rows;
    } else if (args.loss == Loss::kMcxent) {
      d = -y / clamp_prob(a) * inv_rows;
    } else if (args.loss == Loss::kXent) {
      const float p = clamp_prob(a);
      d = (p - y) / (p * (1.f - p)) * inv_rows;
    } else {
      d = 2.f * (a - y) / float(args.cols) * inv_rows;
    }
    args.dz[i] = d;
  }
  block_sum[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) block_sum[threadIdx.x] += block_sum[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(total, block_sum[0]);
}

__global__ void dropout_kernel(const float* in, float* out, float* mask, int64_t n, float rate,
                               uint64_t seed) {
  const float keep_scale = 1.f / (1.f - rate);
  GRID_STRIDE(i, n) {
    const float m = uniform_at(seed, uint64_t(i)) >= rate ? keep_scale : 0.f;
    mask[i] = m;
    out[i] = in[i] * m;
  }
}

unsigned rows_grid(int64_t rows) { return unsigned((rows + kThreads / 32 - 1) / (kThreads / 32)); }

}  // namespace

void fill(cudaStream_t s, float* x, int64_t n, float value) {
  if (n <= 0) return;
  fill_kernel<<<grid_for(n), kThreads, 0, s>>>(x, n, value);
  DTRAIN_CUDA_LAUNCHED();
}

void add_row_vector(cudaStream_t s, float* x, const float* v, int64_t rows, int64_t cols) {
  if (rows * cols <= 0) return;
  add_row_vector_kernel<<<grid_for(rows * cols), kThreads, 0, s>>>(x, v, rows, cols);
  DTRAIN_CUDA_LAUNCHED();
}

void column_sums(cudaStream_t s, const float* x, int64_t rows, int64_t cols, float* sums) {
  if (cols <= 0) return;
  column_sums_kernel<<<grid_for(cols), kThreads, 0, s>>>(x, rows, cols, sums);
  DTRAIN_CUDA_LAUNCHED();
}

void axpy(cudaStream_t s, float alpha, const float* x, float* y, int64_t n) {
  if (n <= 0) return;
  axpy_kernel<<<grid_for(n), kThreads, 0, s>>>(alpha, x, y, n);
  DTRAIN_CUDA_LAUNCHED();
}

void multiply(cudaStream_t s, const float* a, const float* b, float* out, int64_t n) {
  if (n <= 0) return;
  multiply_kernel<<<grid_for(n), kThreads, 0, s>>>(a, b, out, n);
  DTRAIN_CUDA_LAUNCHED();
}

void scale(cudaStream_t s, float* x, int64_t n, float alpha) {
  if (n <= 0) return;
  scale_kernel<<<grid_for(n), kThreads, 0, s>>>(x, n, alpha);
  DTRAIN_CUDA_LAUNCHED();
}

void sum_squares(cudaStream_t s, const float* x, int64_t n, double* total) {
  if (n <= 0) return;
  // At most 256 blocks: each ends in one atomicAdd on the same double, and a thousand of them
  // queue up behind each other.
  sum_squares_kernel<<<std::min(grid_for(n), 256u), kThreads, 0, s>>>(x, n, total);
  DTRAIN_CUDA_LAUNCHED();
}

void clear_sent_sparse(cudaStream_t s, const uint32_t* words, int64_t count, float* x) {
  if (count <= 0) return;
  clear_sparse_kernel<<<grid_for(count), kThreads, 0, s>>>(words, count, x);
  DTRAIN_CUDA_LAUNCHED();
}

void clear_sent_bitmap(cudaStream_t s, const uint32_t* bitmap, int64_t n, float* x) {
  if (n <= 0) return;
  clear_bitmap_kernel<<<grid_for(n), kThreads, 0, s>>>(bitmap, n, x);
  DTRAIN_CUDA_LAUNCHED();
}

void activation_forward(cudaStream_t s, Activation act, float* x, int64_t rows, int64_t cols) {
  if (act == Activation::kIdentity || rows * cols <= 0) return;
  if (act == Activation::kSoftmax)
    softmax_kernel<<<rows_grid(rows), kThreads, 0, s>>>(x, rows, cols);
  else
    activation_forward_kernel<<<grid_for(rows * cols), kThreads, 0, s>>>(act, x, rows * cols);
  DTRAIN_CUDA_LAUNCHED();
}

void activation_backward(cudaStream_t s, Activation act, const float* a, float* d, int64_t rows,
                         int64_t cols) {
  if (act == Activation::kIdentity || rows * cols <= 0) return;
  if (act == Activation::kSoftmax)
    softmax_backward_kernel<<<rows_grid(rows), kThreads, 0, s>>>(a, d, rows, cols);
  else
    activation_backward_kernel<<<grid_for(rows * cols), kThreads, 0, s>>>(act, a, d, rows * cols);
  DTRAIN_CUDA_LAUNCHED();
}

void loss(cudaStream_t s, const LossArgs& args, double* total) {
  const int64_t n = args.rows * args.cols;
  if (n <= 0) return;
  const bool fused = (args.loss == Loss::kMcxent && args.activation == Activation::kSoftmax) ||
                     (args.loss == Loss::kXent && args.activation == Activation::kSigmoid);
  loss_kernel<<<grid_for(n), kThreads, 0, s>>>(args, fused, total);
  DTRAIN_CUDA_LAUNCHED();
  if (args.dz && !fused) activation_backward(s, args.activation, args.a, args.dz, args.rows, args.cols);
}

void dropout_forward(cudaStream_t s, const float* in, float* out, float* mask, int64_t n,
                     float rate, uint64_t seed) {
  if (n <= 0) return;
  dropout_kernel<<<grid_for(n), kThreads, 0, s>>>(in, out, mask, n, rate, seed);
  DTRAIN_CUDA_LAUNCHED();
}

}  // namespace dtrain::kernels::cuda
