#pragma once
// The compute backend (docs/architecture/kernels.md, "The backend interface"): every operation a
// layer, an updater or the codec runs on a worker's tensors, behind one interface, so core/ decides
// what to compute and never names oneDNN or CUDA. "cpu" (oneDNN + OpenMP) is always present; "cuda"
// registers itself in --config=cuda builds when a GPU is present (kernels/backend_registry.cc).
//
// Every pointer an operation takes lives in the backend's memory: host memory for the CPU
// backend, device memory for CUDA (allocate / upload / download move data in and out). An
// operation may run asynchronously on the backend's stream; download, loss and synchronize
// wait for it.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/codec_kernels.h"
#include "kernels/op_args.h"

namespace dtrain::kernels {

// Convolution for one geometry (batch size included). Tensors are NCHW, weights OIHW, bias O.
// Between a forward and the backward calls of the same step the caller leaves src, weights and
// diff_dst unchanged: a GPU kernel in bf16/fp16 reuses their converted copies (keyed by
// pointer; the next forward starts afresh).
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
  // The GPU's ordinal for a GPU backend (emulated ones too); -1 for the CPU.
  virtual int device() const { return -1; }

  // ---- memory
  // True when this backend's pointers are ordinary host memory (the CPU backend).
  virtual bool host_memory() const = 0;
  virtual float* allocate(int64_t n) = 0;  // n floats, uninitialised
  virtual void release(float* p) = 0;
  virtual void upload(float* dst, const float* host_src, int64_t n) = 0;
  virtual void download(float* host_dst, const float* src, int64_t n) = 0;  // waits
  virtual void copy(float* dst, const float* src, int64_t n) = 0;
  // A block of a row-major matrix: dst[r * dst_stride + c] = src[r * src_stride + c] for
  // r < rows, c < cols (concatenating and splitting feature maps per example).
  virtual void copy_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                         int64_t rows, int64_t cols) = 0;
  virtual void fill(float* x, int64_t n, float value) = 0;
  virtual void synchronize() = 0;  // returns once every queued operation has finished

  // ---- dense algebra
  // Row-major C = alpha * op(A) * op(B) + beta * C, op(X) = X or X^T. A is MxK after op.
  virtual void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                    int64_t ldc) = 0;
  virtual void add_row_vector(float* x, const float* v, int64_t rows, int64_t cols) = 0;  // x[r] += v
  virtual void column_sums(const float* x, int64_t rows, int64_t cols, float* sums) = 0;  // overwrites
  virtual void axpy(float alpha, const float* x, float* y, int64_t n) = 0;  // y += alpha x
  virtual void multiply(const float* a, const float* b, float* out, int64_t n) = 0;  // elementwise
  virtual void scale(float* x, int64_t n, float alpha) = 0;                           // x *= alpha
  virtual double sum_squares(const float* x, int64_t n) = 0;  // in double; waits for the result

  // ---- activations and losses
  // z -> a, in place, over [rows, cols].
  virtual void activation_forward(Activation activation, float* x, int64_t rows, int64_t cols) = 0;
  // d(loss)/d(a) -> d(loss)/d(z), in place, from the outputs a.
  virtual void activation_backward(Activation activation, const float* a, float* d, int64_t rows,
                                   int64_t cols) = 0;
  // dz = activation_backward applied to a copy of dout: d(loss)/d(z) written into a tensor of
  // its own, dout left as it is. Backends may do it in one pass (the CPU does).
  virtual void activation_backward_to(Activation activation, const float* a, const float* dout,
                                      float* dz, int64_t rows, int64_t cols) {
    copy(dz, dout, rows * cols);
    activation_backward(activation, a, dz, rows, cols);
  }
  // The mean loss over the rows (and dz when args.dz is set); waits for the result.
  virtual double loss(const LossArgs& args) = 0;

  // ---- layers
  // mask[i] = 1 / (1 - rate) where uniform_at(seed, i) >= rate, else 0; out = in * mask.
  virtual void dropout_forward(const float* in, float* out, float* mask, int64_t n, float rate,
                               uint64_t seed) = 0;
  virtual void batch_norm_forward(const BatchNormArgs& args) = 0;
  virtual void batch_norm_backward(const BatchNormArgs& args) = 0;
  // Over `planes` consecutive runs of `plane` elements: the maximum or the mean of each.
  virtual void global_pool_forward(const float* in, float* out, int64_t planes, int64_t plane,
                                   bool max) = 0;
  // Max: the whole gradient goes to the first maximum of each plane (found again in `in`).
  virtual void global_pool_backward(const float* in, const float* dout, float* din,
                                    int64_t planes, int64_t plane, bool max) = 0;
  // The channel block this backend's convolutions want their activations in (op_args.h), or 0
  // for plain NCHW only. A model keeps the activations of the layers that can take it in this
  // layout, so no reorder runs between them.
  virtual int64_t activation_block() const { return 0; }
  virtual std::unique_ptr<Conv2dKernel> make_conv2d(const ConvGeometry& geometry) = 0;
  virtual std::unique_ptr<Pool2dKernel> make_pool2d(const PoolGeometry& geometry) = 0;

  // ---- updaters and the codec
  virtual void updater_step(const UpdaterArgs& args) = 0;
  // The update codec on this backend's memory (docs/architecture/core.md, "The update"), bit for
  // bit the reference's.
  virtual const CodecKernels& codec() = 0;
  // x[i] = 0 at every element a message sends (momentum factor masking): sparse words, or the
  // n elements a bitmap covers.
  virtual void clear_sent_sparse(const uint32_t* words, int64_t count, float* x) = 0;
  virtual void clear_sent_bitmap(const uint32_t* bitmap, int64_t n, float* x) = 0;

  // Threads the calling thread's kernels may use (OpenMP on the CPU; ignored by CUDA).
  virtual void set_num_threads(int threads) = 0;
  // TF32 tensor-core math for convolutions (on by default where PyTorch has it on by default;
  // the conformance suite turns it off). Matrix products never use it. No effect on the CPU.
  virtual void allow_tf32(bool) {}
  // Mixed precision for matrix products and convolutions (GPU backends;
  // docs/architecture/kernels.md, "Mixed precision"). False when this backend cannot: the CPU
  // computes in fp32 only.
  virtual bool set_precision(Precision precision) { return precision == Precision::kFp32; }
};

// The CPU backend, shared by every CPU worker of the process.
Backend& cpu_backend();
// The backend selected for this process ("cpu" unless select_backend said otherwise).
Backend& backend();
// Throws std::invalid_argument naming the available backends if `name` is unknown or unusable here.
void select_backend(const std::string& name);
std::vector<std::string> available_backends();

// A GPU worker's backend: its own device, stream and library handles. Empty when this build has
// no CUDA backend (`why` then says so) or the device cannot be used.
std::unique_ptr<Backend> make_gpu_backend(int device, std::string* why);

}  // namespace dtrain::kernels
