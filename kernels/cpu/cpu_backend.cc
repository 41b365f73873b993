// The CPU backend: oneDNN's sgemm, convolution and pooling, threaded by OpenMP, and the loops
// of cpu_ops.h for the rest. Its memory is host memory.
#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <oneapi/dnnl/dnnl.hpp>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/onednn_context.h"
#include "kernels/cpu/onednn_kernels.h"

namespace dtrain::kernels {
namespace cpu {
namespace {

class CpuBackend : public Backend {
 public:
  std::string name() const override { return "cpu"; }

  bool host_memory() const override { return true; }
  float* allocate(int64_t n) override {
    // 64-byte aligned for the vector loops; size rounded up as aligned_alloc requires.
    const size_t bytes = (size_t(n > 0 ? n : 1) * sizeof(float) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, bytes);
    if (!p) throw std::bad_alloc();
    return static_cast<float*>(p);
  }
  void release(float* p) override { std::free(p); }
  void upload(float* dst, const float* src, int64_t n) override { copy(dst, src, n); }
  void download(float* dst, const float* src, int64_t n) override { copy(dst, src, n); }
  void copy(float* dst, const float* src, int64_t n) override { cpu::copy(dst, src, n); }
  void copy_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                 int64_t rows, int64_t cols) override {
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(dst + r * dst_stride, src + r * src_stride, sizeof(float) * cols);
  }
  void fill(float* x, int64_t n, float value) override {
    for (int64_t i = 0; i < n; ++i) x[i] = value;
  }
  void synchronize() override {}

  void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
            int64_t ldc) override {
    dnnl::sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c,
                ldc);
  }
  void add_row_vector(float* x, const float* v, int64_t rows, int64_t cols) override {
    cpu::add_row_vector(x, v, rows, cols);
  }
  void column_sums(const float* x, int64_t rows, int64_t cols, float* sums) override {
    cpu::column_sums(x, rows, cols, sums);
  }
  void axpy(float alpha, const float* x, float* y, int64_t n) override { cpu::axpy(alpha, x, y, n); }
  void multiply(const float* a, const float* b, float* out, int64_t n) override {
    cpu::multiply(a, b, out, n);
  }

  void scale(float* x, int64_t n, float alpha) override { cpu::scale(x, n, alpha); }
  double sum_squares(const float* x, int64_t n) override { return cpu::sum_squares(x, n); }

  void activation_forward(Activation activation, float* x, int64_t rows, int64_t cols) override {
    cpu::activation_forward(activation, x, rows, cols);
  }
  void activation_backward(Activation activation, const float* a, float* d, int64_t rows,
                           int64_t cols) override {
    cpu::activation_backward(activation, a, d, rows, cols);
  }
  void activation_backward_to(Activation activation, const float* a, const float* dout, float* dz,
                              int64_t rows, int64_t cols) override {
    cpu::activation_backward_to(activation, a, dout, dz, rows, cols);
  }
  double loss(const LossArgs& args) override { return cpu::loss(args); }

  void dropout_forward(const float* in, float* out, float* mask, int64_t n, float rate,
                       uint64_t seed) override {
    cpu::dropout_forward(in, out, mask, n, rate, seed);
  }
  void batch_norm_forward(const BatchNormArgs& args) override { cpu::batch_norm_forward(args); }
  void batch_norm_backward(const BatchNormArgs& args) override { cpu::batch_norm_backward(args); }
  void global_pool_forward(const float* in, float* out, int64_t planes, int64_t plane,
                           bool max) override {
    cpu::global_pool_forward(in, out, planes, plane, max);
  }
  void global_pool_backward(const float* in, const float* dout, float* din, int64_t planes,
                            int64_t plane, bool max) override {
    cpu::global_pool_backward(in, dout, din, planes, plane, max);
  }
  int64_t activation_block() const override { return preferred_activation_block(); }
  std::unique_ptr<Conv2dKernel> make_conv2d(const ConvGeometry& geometry) override {
    return make_onednn_conv2d(geometry);
  }
  std::unique_ptr<Pool2dKernel> make_pool2d(const PoolGeometry& geometry) override {
    return make_onednn_pool2d(geometry);
  }

  void updater_step(const UpdaterArgs& args) override { cpu::updater_step(args); }
  const CodecKernels& codec() override { return best_codec(); }
  void clear_sent_sparse(const uint32_t* words, int64_t count, float* x) override {
    cpu::clear_sent_sparse(words, count, x);
  }
  void clear_sent_bitmap(const uint32_t* bitmap, int64_t n, float* x) override {
    cpu::clear_sent_bitmap(bitmap, n, x);
  }

  void set_num_threads(int threads) override { omp_set_num_threads(threads < 1 ? 1 : threads); }
};

}  // namespace
}  // namespace cpu

Backend& cpu_backend() {
  static cpu::CpuBackend backend;
  return backend;
}

}  // namespace dtrain::kernels
