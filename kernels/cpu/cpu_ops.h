#pragma once
// The CPU backend's own loops (what oneDNN does not cover), on host memory. Written for
// clarity first: these run at memory speed and are not where a step spends its time.
// cpu_backend.cc dispatches to them; the conformance suite checks them against naive versions.
#include <cstdint>

#include "kernels/codec_kernels.h"
#include "kernels/op_args.h"

namespace dtrain::kernels::cpu {

// Loops over at least this many elements are shared among the OpenMP threads
// (set_num_threads); shorter ones stay on one thread, as a team costs microseconds. Each element
// or channel is computed alone, so results do not depend on the thread count.
constexpr int64_t kParallelFrom = 1 << 15;

// elementwise.cc
void add_row_vector(float* x, const float* v, int64_t rows, int64_t cols);
void column_sums(const float* x, int64_t rows, int64_t cols, float* sums);
void axpy(float alpha, const float* x, float* y, int64_t n);
void multiply(const float* a, const float* b, float* out, int64_t n);
void scale(float* x, int64_t n, float alpha);
double sum_squares(const float* x, int64_t n);
void clear_sent_sparse(const uint32_t* words, int64_t count, float* x);
void clear_sent_bitmap(const uint32_t* bitmap, int64_t n, float* x);
void activation_forward(Activation activation, float* x, int64_t rows, int64_t cols);
void activation_backward(Activation activation, const float* a, float* d, int64_t rows,
                         int64_t cols);
void activation_backward_to(Activation activation, const float* a, const float* dout, float* dz,
                            int64_t rows, int64_t cols);
void copy(float* dst, const float* src, int64_t n);
double loss(const LossArgs& args);
void dropout_forward(const float* in, float* out, float* mask, int64_t n, float rate,
                     uint64_t seed);

// normalization.cc
void batch_norm_forward(const BatchNormArgs& args);
void batch_norm_backward(const BatchNormArgs& args);
void global_pool_forward(const float* in, float* out, int64_t planes, int64_t plane, bool max);
void global_pool_backward(const float* in, const float* dout, float* din, int64_t planes,
                          int64_t plane, bool max);

// updaters.cc
void updater_step(const UpdaterArgs& args);

// codec/codec_select.cc: the fastest codec this CPU runs (AVX-512, AVX2, else portable).
const CodecKernels& best_codec();

}  // namespace dtrain::kernels::cpu
