#pragma once
// The CUDA backend's own kernels (what cuBLAS and cuDNN do not cover), launched on a given
// stream over device memory. cuda_backend.cu dispatches to them. Semantics are those of
// kernels/cpu/cpu_ops.h; the conformance suite compares the two.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_buffer.h"
#include "kernels/op_args.h"

namespace dtrain::kernels::cuda {

// elementwise.cu
void fill(cudaStream_t s, float* x, int64_t n, float value);
void add_row_vector(cudaStream_t s, float* x, const float* v, int64_t rows, int64_t cols);
void column_sums(cudaStream_t s, const float* x, int64_t rows, int64_t cols, float* sums);
void axpy(cudaStream_t s, float alpha, const float* x, float* y, int64_t n);
void multiply(cudaStream_t s, const float* a, const float* b, float* out, int64_t n);
void scale(cudaStream_t s, float* x, int64_t n, float alpha);
// Adds sum x^2 into *total (device memory, zeroed by the caller).
void sum_squares(cudaStream_t s, const float* x, int64_t n, double* total);
void clear_sent_sparse(cudaStream_t s, const uint32_t* words, int64_t count, float* x);
void clear_sent_bitmap(cudaStream_t s, const uint32_t* bitmap, int64_t n, float* x);
void activation_forward(cudaStream_t s, Activation activation, float* x, int64_t rows,
                        int64_t cols);
void activation_backward(cudaStream_t s, Activation activation, const float* a, float* d,
                         int64_t rows, int64_t cols);
// Adds the summed loss terms into *total (device memory, zeroed by the caller) and writes
// args.dz when set.
void loss(cudaStream_t s, const LossArgs& args, double* total);
void dropout_forward(cudaStream_t s, const float* in, float* out, float* mask, int64_t n,
                     float rate, uint64_t seed);

// normalization.cu
// `scratch`: the reductions' partial sums (a few KB, kept by the caller between calls).
void batch_norm_forward(cudaStream_t s, const BatchNormArgs& args, DeviceBuffer& scratch);
void batch_norm_backward(cudaStream_t s, const BatchNormArgs& args, DeviceBuffer& scratch);
// Over NCHW x [batch, channels, plane]: sums[c] = the sum of channel c (a convolution's bias
// gradient), and x += bias[c] (its bias). cuDNN's own took 20% of a ResNet-20 step.
void channel_sums(cudaStream_t s, const float* x, int64_t batch, int64_t channels, int64_t plane,
                  float* sums, DeviceBuffer& scratch);
void add_channel_bias(cudaStream_t s, float* x, const float* bias, int64_t batch,
                      int64_t channels, int64_t plane);
void global_pool_forward(cudaStream_t s, const float* in, float* out, int64_t planes,
                         int64_t plane, bool max);
void global_pool_backward(cudaStream_t s, const float* in, const float* dout, float* din,
                          int64_t planes, int64_t plane, bool max);

// updaters.cu
void updater_step(cudaStream_t s, const UpdaterArgs& args);

// Grid size for a grid-stride loop over n elements.
inline unsigned grid_for(int64_t n, int threads = 256) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 * 8 ? 65535 * 8 : blocks));
}

}  // namespace dtrain::kernels::cuda
