// The CPU backend: oneDNN's sgemm, convolution and pooling, threaded by OpenMP.
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include "kernels/backend.h"
#include "kernels/cpu/onednn_kernels.h"

namespace dtrain::kernels::cpu {
namespace {

class CpuBackend : public Backend {
 public:
  std::string name() const override { return "cpu"; }

  void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
            int64_t ldc) override {
    dnnl::sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c,
                ldc);
  }

  std::unique_ptr<Conv2dKernel> make_conv2d(const ConvGeometry& geometry) override {
    return make_onednn_conv2d(geometry);
  }

  std::unique_ptr<Pool2dKernel> make_pool2d(const PoolGeometry& geometry) override {
    return make_onednn_pool2d(geometry);
  }

  void set_num_threads(int threads) override { omp_set_num_threads(threads < 1 ? 1 : threads); }
};

}  // namespace

Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace dtrain::kernels::cpu
