// The CUDA backend (docs/architecture/kernels.md, "Implementations"): one object per GPU worker,
// with its own device, stream, cuBLAS and cuDNN handles. Matrix products are cuBLAS (FP32, no TF32:
// PyTorch's default for matmul), convolutions and pooling cuDNN, the rest our kernels
// (cuda_ops.h), the codec the kernels of codec_cuda.cu. Operations are queued on the stream;
// download, loss and synchronize wait.
#include <atomic>
#include <memory>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/codec_cuda.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cudnn_layers.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/op_times.h"
#include "kernels/cuda/reduced_precision.h"
#include "kernels/gpu_devices.h"

namespace dtrain::kernels {
namespace cuda {
namespace {

// Bytes dtrain holds on each device (what /metrics and `dtrain-submit nodes` report).
constexpr int kMaxDevices = 64;
std::atomic<int64_t> g_bytes_in_use[kMaxDevices];

class CudaBackend;

// The codec's interface over codec_cuda.cu. CudaCodec runs on its own stream and returns when
// done, so the backend's queued work is finished first.
class CodecAdapter final : public CodecKernels {
 public:
  explicit CodecAdapter(CudaBackend& owner) : owner_(owner) {}
  const char* name() const override { return "cuda"; }
  CodecEncodeResult encode(const CodecEncodeArgs& a) const override;
  void apply_bitmap(const uint32_t* bitmap, int64_t n, float tau, float* params) const override;
  void apply_sparse(const uint32_t* words, int64_t count, float tau, float* params) const override;

 private:
  CudaCodec& codec_for(int64_t n) const;
  CudaBackend& owner_;
  mutable std::unique_ptr<CudaCodec> codec_;
  mutable int64_t capacity_ = 0;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device), codec_(*this) {
    DTRAIN_CUDA_CALL(cudaSetDevice(device));
    DTRAIN_CUDA_CALL(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    DTRAIN_CUBLAS_CALL(cublasCreate(&cublas_));
    DTRAIN_CUBLAS_CALL(cublasSetStream(cublas_, stream_));
    DTRAIN_CUBLAS_CALL(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
    // A workspace of our own, as PyTorch gives cuBLAS: without one, small products ran at
    // 60-250 us each (kernels/cuda/op_times.h).
    DTRAIN_CUDA_CALL(cudaMalloc(&cublas_workspace_, kCublasWorkspace));
    DTRAIN_CUBLAS_CALL(cublasSetWorkspace(cublas_, cublas_workspace_, kCublasWorkspace));
    DTRAIN_CUDNN_CALL(cudnnCreate(&cudnn_));
    DTRAIN_CUDNN_CALL(cudnnSetStream(cudnn_, stream_));
    DTRAIN_CUDA_CALL(cudaMalloc(&scalar_, sizeof(double)));
    DTRAIN_CUDA_CALL(cudaMallocHost(&scalar_host_, sizeof(double)));
  }
  ~CudaBackend() override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    cudaFreeHost(scalar_host_);
    cudaFree(scalar_);
    cudnnDestroy(cudnn_);
    cublasDestroy(cublas_);
    cudaFree(cublas_workspace_);
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "cuda:" + std::to_string(device_); }
  int device() const override { return device_; }
  bool host_memory() const override { return false; }
  void activate() const { DTRAIN_CUDA_CALL(cudaSetDevice(device_)); }

  float* allocate(int64_t n) override {
    activate();
    const size_t bytes = size_t(n > 0 ? n : 1) * sizeof(float);
    void* p = nullptr;
    DTRAIN_CUDA_CALL(cudaMalloc(&p, bytes));
    sizes_.emplace_back(static_cast<float*>(p), bytes);
    g_bytes_in_use[device_ % kMaxDevices] += int64_t(bytes);
    return static_cast<float*>(p);
  }
  void release(float* p) override {
    if (!p) return;
    activate();
    cudaStreamSynchronize(stream_);  // no queued kernel may still use it
    for (size_t i = 0; i < sizes_.size(); ++i)
      if (sizes_[i].first == p) {
        g_bytes_in_use[device_ % kMaxDevices] -= int64_t(sizes_[i].second);
        sizes_[i] = sizes_.back();
        sizes_.pop_back();
        break;
      }
    DTRAIN_CUDA_CALL(cudaFree(p));
  }
  void upload(float* dst, const float* src, int64_t n) override {
    activate();
    OpTimer timer(stream_, "upload");
    if (n > 0)
      DTRAIN_CUDA_CALL(cudaMemcpyAsync(dst, src, sizeof(float) * n, cudaMemcpyHostToDevice, stream_));
  }
  void download(float* dst, const float* src, int64_t n) override {
    activate();
    OpTimer timer(stream_, "download");
    if (n > 0)
      DTRAIN_CUDA_CALL(cudaMemcpyAsync(dst, src, sizeof(float) * n, cudaMemcpyDeviceToHost, stream_));
    synchronize();
  }
  void copy(float* dst, const float* src, int64_t n) override {
    activate();
    OpTimer timer(stream_, "copy");
    if (n > 0 && dst != src)
      DTRAIN_CUDA_CALL(cudaMemcpyAsync(dst, src, sizeof(float) * n, cudaMemcpyDeviceToDevice, stream_));
  }
  void copy_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                 int64_t rows, int64_t cols) override {
    activate();
    OpTimer timer(stream_, "copy_rows");
    if (rows > 0 && cols > 0)
      DTRAIN_CUDA_CALL(cudaMemcpy2DAsync(dst, sizeof(float) * dst_stride, src,
                                         sizeof(float) * src_stride, sizeof(float) * cols, rows,
                                         cudaMemcpyDeviceToDevice, stream_));
  }
  void fill(float* x, int64_t n, float value) override {
    activate();
    OpTimer timer(stream_, "fill");
    cuda::fill(stream_, x, n, value);
  }
  void synchronize() override {
    activate();
    DTRAIN_CUDA_CALL(cudaStreamSynchronize(stream_));
    flush_op_times();
  }

  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
  void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
            int64_t ldc) override {
    activate();
    OpTimer timer(stream_, "gemm");
    const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (precision_ == Precision::kFp32) {
      DTRAIN_CUBLAS_CALL(cublasSgemm(cublas_, op_b, op_a, int(n), int(m), int(k), &alpha, b,
                                     int(ldb), a, int(lda), &beta, c, int(ldc)));
      return;
    }
    // Mixed precision: A and B (their stored rows) converted, fp32 accumulation and C.
    const int64_t a_n = gemm_operand_elements(trans_a, m, k, lda);
    const int64_t b_n = gemm_operand_elements(trans_b, k, n, ldb);
    void* a16 = reduced_a_.get(stream_, cuda::reduced_bytes(a_n));
    void* b16 = reduced_b_.get(stream_, cuda::reduced_bytes(b_n));
    cuda::to_reduced(stream_, precision_, a, a16, a_n);
    cuda::to_reduced(stream_, precision_, b, b16, b_n);
    const cudaDataType_t type = precision_ == Precision::kBf16 ? CUDA_R_16BF : CUDA_R_16F;
    DTRAIN_CUBLAS_CALL(cublasGemmEx(cublas_, op_b, op_a, int(n), int(m), int(k), &alpha, b16,
                                    type, int(ldb), a16, type, int(lda), &beta, c, CUDA_R_32F,
                                    int(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  void add_row_vector(float* x, const float* v, int64_t rows, int64_t cols) override {
    activate();
    OpTimer timer(stream_, "add_row_vector");
    cuda::add_row_vector(stream_, x, v, rows, cols);
  }
  void column_sums(const float* x, int64_t rows, int64_t cols, float* sums) override {
    activate();
    OpTimer timer(stream_, "column_sums");
    cuda::column_sums(stream_, x, rows, cols, sums);
  }
  void axpy(float alpha, const float* x, float* y, int64_t n) override {
    activate();
    OpTimer timer(stream_, "axpy");
    cuda::axpy(stream_, alpha, x, y, n);
  }
  void multiply(const float* a, const float* b, float* out, int64_t n) override {
    activate();
    OpTimer timer(stream_, "multiply");
    cuda::multiply(stream_, a, b, out, n);
  }
  void scale(float* x, int64_t n, float alpha) override {
    activate();
    OpTimer timer(stream_, "scale");
    cuda::scale(stream_, x, n, alpha);
  }
  double sum_squares(const float* x, int64_t n) override {
    activate();
    OpTimer timer(stream_, "sum_squares");
    DTRAIN_CUDA_CALL(cudaMemsetAsync(scalar_, 0, sizeof(double), stream_));
    cuda::sum_squares(stream_, x, n, scalar_);
    return read_scalar();
  }
  void activation_forward(Activation act, float* x, int64_t rows, int64_t cols) override {
    activate();
    OpTimer timer(stream_, "activation_forward");
    cuda::activation_forward(stream_, act, x, rows, cols);
  }
  void activation_backward(Activation act, const float* a, float* d, int64_t rows,
                           int64_t cols) override {
    activate();
    OpTimer timer(stream_, "activation_backward");
    cuda::activation_backward(stream_, act, a, d, rows, cols);
  }
  double loss(const LossArgs& args) override {
    activate();
    OpTimer timer(stream_, "loss");
    DTRAIN_CUDA_CALL(cudaMemsetAsync(scalar_, 0, sizeof(double), stream_));
    cuda::loss(stream_, args, scalar_);
    return read_scalar() / double(args.rows);
  }
  // The double in scalar_, once the stream got there.
  double read_scalar() {
    DTRAIN_CUDA_CALL(cudaMemcpyAsync(scalar_host_, scalar_, sizeof(double),
                                     cudaMemcpyDeviceToHost, stream_));
    // Not synchronize(): the op timers' bookkeeping would land inside this operation's time.
    DTRAIN_CUDA_CALL(cudaStreamSynchronize(stream_));
    return *scalar_host_;
  }
  void dropout_forward(const float* in, float* out, float* mask, int64_t n, float rate,
                       uint64_t seed) override {
    activate();
    OpTimer timer(stream_, "dropout_forward");
    cuda::dropout_forward(stream_, in, out, mask, n, rate, seed);
  }
  void batch_norm_forward(const BatchNormArgs& args) override {
    activate();
    OpTimer timer(stream_, "batch_norm_forward");
    cuda::batch_norm_forward(stream_, args, bn_scratch_);
  }
  void batch_norm_backward(const BatchNormArgs& args) override {
    activate();
    OpTimer timer(stream_, "batch_norm_backward");
    cuda::batch_norm_backward(stream_, args, bn_scratch_);
  }
  void global_pool_forward(const float* in, float* out, int64_t planes, int64_t plane,
                           bool max) override {
    activate();
    OpTimer timer(stream_, "global_pool_forward");
    cuda::global_pool_forward(stream_, in, out, planes, plane, max);
  }
  void global_pool_backward(const float* in, const float* dout, float* din, int64_t planes,
                            int64_t plane, bool max) override {
    activate();
    OpTimer timer(stream_, "global_pool_backward");
    cuda::global_pool_backward(stream_, in, dout, din, planes, plane, max);
  }
  std::unique_ptr<Conv2dKernel> make_conv2d(const ConvGeometry& geometry) override {
    activate();
    return make_cudnn_conv2d(cudnn_, geometry, tf32_, precision_);
  }
  std::unique_ptr<Pool2dKernel> make_pool2d(const PoolGeometry& geometry) override {
    activate();
    return make_cudnn_pool2d(cudnn_, geometry);
  }
  void updater_step(const UpdaterArgs& args) override {
    activate();
    OpTimer timer(stream_, "updater_step");
    cuda::updater_step(stream_, args);
  }
  const CodecKernels& codec() override { return codec_; }
  void clear_sent_sparse(const uint32_t* words, int64_t count, float* x) override {
    activate();
    OpTimer timer(stream_, "clear_sent_sparse");
    cuda::clear_sent_sparse(stream_, words, count, x);
  }
  void clear_sent_bitmap(const uint32_t* bitmap, int64_t n, float* x) override {
    activate();
    OpTimer timer(stream_, "clear_sent_bitmap");
    cuda::clear_sent_bitmap(stream_, bitmap, n, x);
  }
  void set_num_threads(int) override {}
  void allow_tf32(bool allow) override { tf32_ = allow; }
  // bf16 needs tensor cores of compute capability 8.0 or newer; fp16 runs on any GPU this
  // build targets (sm_90).
  bool set_precision(Precision p) override {
    activate();
    int major = 0;
    DTRAIN_CUDA_CALL(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_));
    if (p == Precision::kBf16 && major < 8) return false;
    precision_ = p;
    return true;
  }

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
  static constexpr size_t kCublasWorkspace = size_t(32) << 20;
  cublasHandle_t cublas_ = nullptr;
  void* cublas_workspace_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  double* scalar_ = nullptr;
  double* scalar_host_ = nullptr;  // pinned
  bool tf32_ = true;             // convolutions, as PyTorch's cudnn.allow_tf32 default
  Precision precision_ = Precision::kFp32;  // products and convolutions (training.precision)
  cuda::DeviceBuffer bn_scratch_;             // batch norm's partial sums
  cuda::DeviceBuffer reduced_a_, reduced_b_;  // gemm operands converted to it
  std::vector<std::pair<float*, size_t>> sizes_;
  CodecAdapter codec_;
};

CudaCodec& CodecAdapter::codec_for(int64_t n) const {
  owner_.synchronize();
  if (!codec_ || n > capacity_) {
    codec_ = std::make_unique<CudaCodec>(n);
    capacity_ = n;
  }
  return *codec_;
}

CodecEncodeResult CodecAdapter::encode(const CodecEncodeArgs& a) const {
  const DeviceEncodeResult r =
      codec_for(a.n).encode(a.residual, a.update, a.n, a.tau, a.clip, a.bitmap, a.sparse);
  CodecEncodeResult out;
  out.count = r.count;
  out.nonfinite_index = r.nonfinite_index;
  out.residual_sum_squares = r.residual_sum_squares;
  return out;
}

void CodecAdapter::apply_bitmap(const uint32_t* bitmap, int64_t n, float tau,
                                float* params) const {
  // Applying needs no scratch sized to n: reuse whatever codec encoding made.
  codec_for(std::max<int64_t>(capacity_, 1)).apply_bitmap(bitmap, n, tau, params);
}

void CodecAdapter::apply_sparse(const uint32_t* words, int64_t count, float tau,
                                float* params) const {
  codec_for(std::max<int64_t>(capacity_, 1)).apply_sparse(words, count, tau, params);
}

}  // namespace
}  // namespace cuda

std::vector<GpuInfo> list_gpus(std::string* why) {
  std::vector<GpuInfo> out;
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (why) *why = std::string("no usable CUDA device: ") + cudaGetErrorString(err);
    return out;
  }
  if (count == 0 && why) *why = "no CUDA device present";
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
    GpuInfo info;
    info.index = d;
    info.name = prop.name;
    info.memory_bytes = int64_t(prop.totalGlobalMem);
    info.memory_used_bytes = cuda::g_bytes_in_use[d % cuda::kMaxDevices].load();
    out.push_back(info);
  }
  return out;
}

std::unique_ptr<Backend> make_gpu_backend(int device, std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || device < 0 || device >= count) {
    if (why)
      *why = err != cudaSuccess ? std::string("no usable CUDA device: ") + cudaGetErrorString(err)
                                : "GPU " + std::to_string(device) + " does not exist (" +
                                      std::to_string(count) + " present)";
    return nullptr;
  }
  try {
    return std::make_unique<cuda::CudaBackend>(device);
  } catch (const std::exception& e) {
    if (why) *why = e.what();
    return nullptr;
  }
}

}  // namespace dtrain::kernels
