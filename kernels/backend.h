#pragma once
// The compute backend: the heavy operations (matrix products, convolutions, pooling) behind one
// interface, so core/ never names oneDNN or CUDA. The backend is chosen at run time
// (select_backend); "cpu" (oneDNN) is always present.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dtrain::kernels {

// The sliding window of a convolution or a pooling: size, step and zero padding per side.
struct Window2d {
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t out_h(int64_t in_h) const { return (in_h + 2 * pad_h - kernel_h) / stride_h + 1; }
  int64_t out_w(int64_t in_w) const { return (in_w + 2 * pad_w - kernel_w) / stride_w + 1; }
};

struct ConvGeometry {
  int64_t batch = 0, in_channels = 0, in_h = 0, in_w = 0, out_channels = 0;
  Window2d window;
  int64_t out_h() const { return window.out_h(in_h); }
  int64_t out_w() const { return window.out_w(in_w); }
};

struct PoolGeometry {
  int64_t batch = 0, channels = 0, in_h = 0, in_w = 0;
  Window2d window;
  bool max = true;  // false: average (padding excluded from the count)
  int64_t out_h() const { return window.out_h(in_h); }
  int64_t out_w() const { return window.out_w(in_w); }
};

// Convolution for one geometry (batch size included). Tensors are NCHW, weights OIHW, bias O.
class Conv2dKernel {
 public:
  virtual ~Conv2dKernel() = default;
  virtual void forward(const float* src, const float* weights, const float* bias, float* dst) = 0;
  virtual void backward_data(const float* diff_dst, const float* weights, float* diff_src) = 0;
  // Overwrites diff_weights and diff_bias.
  virtual void backward_weights(const float* src, const float* diff_dst, float* diff_weights,
                                float* diff_bias) = 0;
};

// Pooling for one geometry. Max pooling remembers where the maxima were between forward and
// backward, so one kernel object serves one forward/backward pair at a time.
class Pool2dKernel {
 public:
  virtual ~Pool2dKernel() = default;
  virtual void forward(const float* src, float* dst) = 0;
  virtual void backward(const float* diff_dst, float* diff_src) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // Row-major C = alpha * op(A) * op(B) + beta * C, op(X) = X or X^T. A is MxK after op.
  virtual void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                    int64_t ldc) = 0;
  virtual std::unique_ptr<Conv2dKernel> make_conv2d(const ConvGeometry& geometry) = 0;
  virtual std::unique_ptr<Pool2dKernel> make_pool2d(const PoolGeometry& geometry) = 0;

  // Threads the calling thread's kernels may use (OpenMP on the CPU).
  virtual void set_num_threads(int threads) = 0;
};

// The backend selected for this process ("cpu" unless select_backend said otherwise).
Backend& backend();
// Throws std::invalid_argument naming the available backends if `name` is unknown or unusable here.
void select_backend(const std::string& name);
std::vector<std::string> available_backends();

}  // namespace dtrain::kernels
