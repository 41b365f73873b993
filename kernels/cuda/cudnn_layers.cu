// cuDNN convolution and pooling (kernels/cuda/cudnn_layers.h). Algorithms are picked once per
// geometry by cuDNN's heuristics (cudnnGet*_v7, best first that fits the workspace limit), and
// the workspace is allocated once per kernel object.
#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cudnn_layers.h"
#include "kernels/cuda/reduced_precision.h"

namespace dtrain::kernels::cuda {
namespace {

constexpr size_t kWorkspaceLimit = size_t(256) << 20;  // per convolution

cudnnDataType_t cudnn_type(Precision p) {
  switch (p) {
    case Precision::kBf16: return CUDNN_DATA_BFLOAT16;
    case Precision::kFp16: return CUDNN_DATA_HALF;
    case Precision::kFp32: break;
  }
  return CUDNN_DATA_FLOAT;
}

cudnnTensorDescriptor_t tensor4d(int64_t n, int64_t c, int64_t h, int64_t w,
                                 cudnnDataType_t type = CUDNN_DATA_FLOAT) {
  cudnnTensorDescriptor_t d;
  DTRAIN_CUDNN_CALL(cudnnCreateTensorDescriptor(&d));
  DTRAIN_CUDNN_CALL(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, type, int(n), int(c),
                                               int(h), int(w)));
  return d;
}

// The first (fastest) algorithm that fits the workspace limit, with the math type cuDNN
// ranked it under: in bf16/fp16 each direction runs under its own (forcing tensor-op math on
// every algorithm has given NaNs in bf16 elsewhere, oneDNN's cuDNN backend).
template <typename Perf, typename Algo>
Algo pick(const Perf* perf, int count, size_t* workspace, cudnnMathType_t* math) {
  for (int i = 0; i < count; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= kWorkspaceLimit) {
      *workspace = std::max(*workspace, perf[i].memory);
      *math = perf[i].mathType;
      return perf[i].algo;
    }
  throw CudaError(std::string("cuDNN found no convolution algorithm for this layer's shape and "
                              "type within a 256 MiB workspace (") +
                  std::to_string(count) + " offered); " + cuda_fix(true));
}

class CudnnConv2d : public Conv2dKernel {
 public:
  CudnnConv2d(cudnnHandle_t handle, const ConvGeometry& g, bool allow_tf32, Precision p)
      : handle_(handle), precision_(p) {
    const Window2d& w = g.window;
    const cudnnDataType_t type = cudnn_type(p);
    src_n_ = g.src_elements();
    dst_n_ = g.dst_elements();
    filter_n_ = g.filter_elements();
    // The convolution's own descriptors are in its type; the bias is added (and its gradient
    // summed) on the fp32 tensors.
    src_ = tensor4d(g.batch, g.in_channels, g.in_h, g.in_w, type);
    dst_ = tensor4d(g.batch, g.out_channels, g.out_h(), g.out_w(), type);
    dst32_ = reduced() ? tensor4d(g.batch, g.out_channels, g.out_h(), g.out_w()) : dst_;
    bias_ = tensor4d(1, g.out_channels, 1, 1);
    DTRAIN_CUDNN_CALL(cudnnCreateFilterDescriptor(&filter_));
    DTRAIN_CUDNN_CALL(cudnnSetFilter4dDescriptor(filter_, type, CUDNN_TENSOR_NCHW,
                                                 int(g.out_channels), int(g.in_channels),
                                                 int(w.kernel_h), int(w.kernel_w)));
    DTRAIN_CUDNN_CALL(cudnnCreateConvolutionDescriptor(&conv_));
    DTRAIN_CUDNN_CALL(cudnnSetConvolution2dDescriptor(conv_, int(w.pad_h), int(w.pad_w),
                                                      int(w.stride_h), int(w.stride_w), 1, 1,
                                                      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    // The math allowed while cuDNN ranks algorithms; each chosen one then runs under the math
    // type it was ranked with. TENSOR_OP_MATH_ALLOW_CONVERSION is not asked for: bf16/fp16 is
    // what the operands already are.
    const cudnnMathType_t math = reduced() ? CUDNN_TENSOR_OP_MATH
                                           : (allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH);
    DTRAIN_CUDNN_CALL(cudnnSetConvolutionMathType(conv_, math));
    DTRAIN_CUDNN_CALL(cudnnGetStream(handle_, &stream_));
    choose_algorithms();
    // fp32 keeps the math it asked for (no TF32 sneaking in where it was turned off).
    if (!reduced()) math_fwd_ = math_bwd_data_ = math_bwd_filter_ = math;
    if (workspace_bytes_ > 0) DTRAIN_CUDA_CALL(cudaMalloc(&workspace_, workspace_bytes_));
  }
  ~CudnnConv2d() override {
    if (workspace_) cudaFree(workspace_);
    cudnnDestroyConvolutionDescriptor(conv_);
    cudnnDestroyFilterDescriptor(filter_);
    cudnnDestroyTensorDescriptor(bias_);
    if (dst32_ != dst_) cudnnDestroyTensorDescriptor(dst32_);
    cudnnDestroyTensorDescriptor(dst_);
    cudnnDestroyTensorDescriptor(src_);
  }

  void forward(const float* src, const float* weights, const float* bias, float* dst) override {
    const float one = 1.f, zero = 0.f;
    const void* x = in(src, src_n_, src16_);
    const void* w = in(weights, filter_n_, filter16_);
    void* y = reduced() ? dst16_.get(stream_, dst_n_) : dst;
    DTRAIN_CUDNN_CALL(cudnnSetConvolutionMathType(conv_, math_fwd_));
    DTRAIN_CUDNN_CALL(cudnnConvolutionForward(handle_, &one, src_, x, filter_, w, conv_, fwd_,
                                              workspace_, workspace_bytes_, &zero, dst_, y));
    if (reduced()) from_reduced(stream_, precision_, y, dst, dst_n_);
    DTRAIN_CUDNN_CALL(cudnnAddTensor(handle_, &one, bias_, bias, &one, dst32_, dst));
  }
  void backward_data(const float* diff_dst, const float* weights, float* diff_src) override {
    const float one = 1.f, zero = 0.f;
    const void* dy = in(diff_dst, dst_n_, dst16_);
    const void* w = in(weights, filter_n_, filter16_);
    void* dx = reduced() ? src16_.get(stream_, src_n_) : diff_src;
    DTRAIN_CUDNN_CALL(cudnnSetConvolutionMathType(conv_, math_bwd_data_));
    DTRAIN_CUDNN_CALL(cudnnConvolutionBackwardData(handle_, &one, filter_, w, dst_, dy, conv_,
                                                   bwd_data_, workspace_, workspace_bytes_,
                                                   &zero, src_, dx));
    if (reduced()) from_reduced(stream_, precision_, dx, diff_src, src_n_);
  }
  void backward_weights(const float* src, const float* diff_dst, float* diff_weights,
                        float* diff_bias) override {
    const float one = 1.f, zero = 0.f;
    const void* x = in(src, src_n_, src16_);
    const void* dy = in(diff_dst, dst_n_, dst16_);
    void* dw = reduced() ? filter16_.get(stream_, filter_n_) : diff_weights;
    DTRAIN_CUDNN_CALL(cudnnSetConvolutionMathType(conv_, math_bwd_filter_));
    DTRAIN_CUDNN_CALL(cudnnConvolutionBackwardFilter(handle_, &one, src_, x, dst_, dy, conv_,
                                                     bwd_filter_, workspace_, workspace_bytes_,
                                                     &zero, filter_, dw));
    if (reduced()) from_reduced(stream_, precision_, dw, diff_weights, filter_n_);
    DTRAIN_CUDNN_CALL(cudnnConvolutionBackwardBias(handle_, &one, dst32_, diff_dst, &zero, bias_,
                                                   diff_bias));
  }

 private:
  bool reduced() const { return precision_ != Precision::kFp32; }
  // An fp32 operand as the convolution takes it: itself, or converted into `buffer`.
  const void* in(const float* x, int64_t n, ReducedBuffer& buffer) {
    if (!reduced()) return x;
    void* out = buffer.get(stream_, n);
    to_reduced(stream_, precision_, x, out, n);
    return out;
  }

  void choose_algorithms() {
    int count = 0;
    cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    DTRAIN_CUDNN_CALL(cudnnGetConvolutionForwardAlgorithm_v7(
        handle_, src_, filter_, conv_, dst_, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, fwd));
    fwd_ = pick<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
        fwd, count, &workspace_bytes_, &math_fwd_);
    cudnnConvolutionBwdDataAlgoPerf_t data[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    DTRAIN_CUDNN_CALL(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        handle_, filter_, dst_, conv_, src_, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, data));
    bwd_data_ = pick<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
        data, count, &workspace_bytes_, &math_bwd_data_);
    cudnnConvolutionBwdFilterAlgoPerf_t filt[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    DTRAIN_CUDNN_CALL(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        handle_, src_, dst_, conv_, filter_, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count,
        filt));
    bwd_filter_ = pick<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
        filt, count, &workspace_bytes_, &math_bwd_filter_);
  }

  cudnnHandle_t handle_;
  Precision precision_;
  cudaStream_t stream_ = nullptr;
  int64_t src_n_ = 0, dst_n_ = 0, filter_n_ = 0;
  // Converted operands and results (reduced precision only).
  ReducedBuffer src16_, dst16_, filter16_;
  cudnnTensorDescriptor_t src_ = nullptr, dst_ = nullptr, dst32_ = nullptr, bias_ = nullptr;
  cudnnFilterDescriptor_t filter_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
  cudnnConvolutionFwdAlgo_t fwd_{};
  cudnnConvolutionBwdDataAlgo_t bwd_data_{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_{};
  // The math type each direction's algorithm was chosen under (set before each call).
  cudnnMathType_t math_fwd_{}, math_bwd_data_{}, math_bwd_filter_{};
  size_t workspace_bytes_ = 0;
  void* workspace_ = nullptr;
};

// cuDNN's pooling backward needs the forward's input and output: the kernel keeps pointers to
// them (the layer keeps both tensors alive until its backward, see Pool2dKernel).
class CudnnPool2d : public Pool2dKernel {
 public:
  CudnnPool2d(cudnnHandle_t handle, const PoolGeometry& g) : handle_(handle) {
    const Window2d& w = g.window;
    src_ = tensor4d(g.batch, g.channels, g.in_h, g.in_w);
    dst_ = tensor4d(g.batch, g.channels, g.out_h(), g.out_w());
    DTRAIN_CUDNN_CALL(cudnnCreatePoolingDescriptor(&pool_));
    DTRAIN_CUDNN_CALL(cudnnSetPooling2dDescriptor(
        pool_, g.max ? CUDNN_POOLING_MAX : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING,
        CUDNN_NOT_PROPAGATE_NAN, int(w.kernel_h), int(w.kernel_w), int(w.pad_h), int(w.pad_w),
        int(w.stride_h), int(w.stride_w)));
  }
  ~CudnnPool2d() override {
    cudnnDestroyPoolingDescriptor(pool_);
    cudnnDestroyTensorDescriptor(dst_);
    cudnnDestroyTensorDescriptor(src_);
  }
  void forward(const float* src, float* dst) override {
    const float one = 1.f, zero = 0.f;
    DTRAIN_CUDNN_CALL(cudnnPoolingForward(handle_, pool_, &one, src_, src, &zero, dst_, dst));
    last_src_ = src;
    last_dst_ = dst;
  }
  void backward(const float* diff_dst, float* diff_src) override {
    if (!last_src_)
      throw CudaError("pooling backward before any forward (a bug in the caller)");
    const float one = 1.f, zero = 0.f;
    DTRAIN_CUDNN_CALL(cudnnPoolingBackward(handle_, pool_, &one, dst_, last_dst_, dst_, diff_dst,
                                           src_, last_src_, &zero, src_, diff_src));
  }

 private:
  cudnnHandle_t handle_;
  cudnnTensorDescriptor_t src_ = nullptr, dst_ = nullptr;
  cudnnPoolingDescriptor_t pool_ = nullptr;
  const float* last_src_ = nullptr;
  const float* last_dst_ = nullptr;
};

}  // namespace

std::unique_ptr<Conv2dKernel> make_cudnn_conv2d(cudnnHandle_t handle, const ConvGeometry& g,
                                                bool allow_tf32, Precision precision) {
  return std::make_unique<CudnnConv2d>(handle, g, allow_tf32, precision);
}

std::unique_ptr<Pool2dKernel> make_cudnn_pool2d(cudnnHandle_t handle, const PoolGeometry& g) {
  return std::make_unique<CudnnPool2d>(handle, g);
}

}  // namespace dtrain::kernels::cuda
