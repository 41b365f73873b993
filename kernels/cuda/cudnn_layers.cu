// cuDNN convolution and pooling (kernels/cuda/cudnn_layers.h). Algorithms are picked once per
// geometry by timing them (cudnnFind*; the fastest that fits the workspace limit), and the
// workspace is allocated once per kernel object.
#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cudnn_layers.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/op_times.h"
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

cudnnFilterDescriptor_t filter4d(const ConvGeometry& g, cudnnDataType_t type) {
  cudnnFilterDescriptor_t f;
  DTRAIN_CUDNN_CALL(cudnnCreateFilterDescriptor(&f));
  DTRAIN_CUDNN_CALL(cudnnSetFilter4dDescriptor(f, type, CUDNN_TENSOR_NCHW, int(g.out_channels),
                                               int(g.in_channels), int(g.window.kernel_h),
                                               int(g.window.kernel_w)));
  return f;
}

// The convolution (fp32 accumulation) with the math cuDNN may use while ranking algorithms.
cudnnConvolutionDescriptor_t conv2d_descriptor(const ConvGeometry& g, cudnnMathType_t math) {
  const Window2d& w = g.window;
  cudnnConvolutionDescriptor_t c;
  DTRAIN_CUDNN_CALL(cudnnCreateConvolutionDescriptor(&c));
  DTRAIN_CUDNN_CALL(cudnnSetConvolution2dDescriptor(c, int(w.pad_h), int(w.pad_w),
                                                    int(w.stride_h), int(w.stride_w), 1, 1,
                                                    CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  DTRAIN_CUDNN_CALL(cudnnSetConvolutionMathType(c, math));
  return c;
}

// The first (fastest) algorithm that fits the workspace limit, with the math type cuDNN
// ranked it under: in bf16/fp16 each direction runs under its own (forcing tensor-op math on
// every algorithm has given NaNs in bf16 elsewhere, oneDNN's cuDNN backend).
template <typename Perf, typename Algo>
Algo pick(const Perf* perf, int count, size_t* workspace, cudnnMathType_t* math,
          float* ms = nullptr) {
  for (int i = 0; i < count; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= kWorkspaceLimit) {
      *workspace = std::max(*workspace, perf[i].memory);
      *math = perf[i].mathType;
      if (ms) *ms = perf[i].time;
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
    const cudnnDataType_t type = cudnn_type(p);
    src_n_ = g.src_elements();
    dst_n_ = g.dst_elements();
    filter_n_ = g.filter_elements();
    batch_ = g.batch;
    out_channels_ = g.out_channels;
    out_plane_ = g.out_h() * g.out_w();
    // The convolution's own descriptors are in its type; the bias is added (and its gradient
    // summed) on the fp32 tensors, by our kernels (cuda_ops.h).
    src_ = tensor4d(g.batch, g.in_channels, g.in_h, g.in_w, type);
    dst_ = tensor4d(g.batch, g.out_channels, g.out_h(), g.out_w(), type);
    filter_ = filter4d(g, type);
    // The math allowed while cuDNN ranks algorithms; each chosen one then runs under the math
    // type it was ranked with. TENSOR_OP_MATH_ALLOW_CONVERSION is not asked for: bf16/fp16 is
    // what the operands already are.
    const cudnnMathType_t math = reduced() ? CUDNN_TENSOR_OP_MATH
                                           : (allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH);
    conv_ = conv2d_descriptor(g, math);
    DTRAIN_CUDNN_CALL(cudnnGetStream(handle_, &stream_));
    choose_algorithms();
    // fp32 keeps the math it asked for (no TF32 sneaking in where it was turned off).
    if (!reduced()) math_fwd_ = math_bwd_data_ = math_bwd_filter_ = math;
    if (reduced()) maybe_weight_gradient_in_fp32(g, allow_tf32);
    if (workspace_bytes_ > 0) DTRAIN_CUDA_CALL(cudaMalloc(&workspace_, workspace_bytes_));
  }
  ~CudnnConv2d() override {
    if (workspace_) cudaFree(workspace_);
    if (conv32_) cudnnDestroyConvolutionDescriptor(conv32_);
    if (filter32_) cudnnDestroyFilterDescriptor(filter32_);
    if (dst32_) cudnnDestroyTensorDescriptor(dst32_);
    if (src32_) cudnnDestroyTensorDescriptor(src32_);
    cudnnDestroyConvolutionDescriptor(conv_);
    cudnnDestroyFilterDescriptor(filter_);
    cudnnDestroyTensorDescriptor(dst_);
    cudnnDestroyTensorDescriptor(src_);
  }

  void forward(const float* src, const float* weights, const float* bias, float* dst) override {
    const float one = 1.f, zero = 0.f;
    // A new forward: what backward may reuse is this call's converted src and weights.
    converted_ = Converted{};
    const void* x = in(src, src_n_, src16_, &converted_.src);
    const void* w = in(weights, filter_n_, filter16_, &converted_.weights);
    void* y = reduced() ? out16_.get(stream_, reduced_bytes(dst_n_)) : dst;
    DTRAIN_CUDNN_CALL(cudnnSetConvolutionMathType(conv_, math_fwd_));
    {
      OpTimer timer(stream_, "conv.forward");
      DTRAIN_CUDNN_CALL(cudnnConvolutionForward(handle_, &one, src_, x, filter_, w, conv_, fwd_,
                                                workspace_, workspace_bytes_, &zero, dst_, y));
    }
    if (reduced()) from_reduced(stream_, precision_, y, dst, dst_n_);
    if (bias) {
      OpTimer timer(stream_, "conv.add_bias");
      add_channel_bias(stream_, dst, bias, batch_, out_channels_, out_plane_);
    }
  }
  // Backward passes the tensors of the last forward (and diff_dst to both directions): in
  // bf16/fp16 their converted copies are reused where the pointer is the same, so each operand
  // is converted once per step (the caller changes none of them in between).
  void backward_data(const float* diff_dst, const float* weights, float* diff_src) override {
    const float one = 1.f, zero = 0.f;
    const void* dy = in(diff_dst, dst_n_, dst16_, &converted_.diff_dst);
    const void* w = in(weights, filter_n_, filter16_, &converted_.weights);
    void* dx = reduced() ? out16_.get(stream_, reduced_bytes(src_n_)) : diff_src;
    DTRAIN_CUDNN_CALL(cudnnSetConvolutionMathType(conv_, math_bwd_data_));
    {
      OpTimer timer(stream_, "conv.backward_data");
      DTRAIN_CUDNN_CALL(cudnnConvolutionBackwardData(handle_, &one, filter_, w, dst_, dy, conv_,
                                                     bwd_data_, workspace_, workspace_bytes_,
                                                     &zero, src_, dx));
    }
    if (reduced()) from_reduced(stream_, precision_, dx, diff_src, src_n_);
  }
  void backward_weights(const float* src, const float* diff_dst, float* diff_weights,
                        float* diff_bias) override {
    if (weight_gradient_fp32_) {
      weight_gradient(fp32_weight_gradient(src, diff_dst, diff_weights));
    } else {
      const void* x = in(src, src_n_, src16_, &converted_.src);
      const void* dy = in(diff_dst, dst_n_, dst16_, &converted_.diff_dst);
      void* dw = reduced() ? out16_.get(stream_, reduced_bytes(filter_n_)) : diff_weights;
      weight_gradient({src_, x, dst_, dy, filter_, dw, conv_, bwd_filter_, math_bwd_filter_});
      if (reduced()) from_reduced(stream_, precision_, dw, diff_weights, filter_n_);
    }
    if (diff_bias) {
      OpTimer timer(stream_, "conv.bias_gradient");
      channel_sums(stream_, diff_dst, batch_, out_channels_, out_plane_, diff_bias, sums_);
    }
  }

 private:
  bool reduced() const { return precision_ != Precision::kFp32; }

  // One weight-gradient call: descriptors, operands and algorithm.
  struct WeightGradient {
    cudnnTensorDescriptor_t src;
    const void* x;
    cudnnTensorDescriptor_t dst;
    const void* dy;
    cudnnFilterDescriptor_t filter;
    void* dw;
    cudnnConvolutionDescriptor_t conv;
    cudnnConvolutionBwdFilterAlgo_t algo;
    cudnnMathType_t math;
  };
  WeightGradient fp32_weight_gradient(const float* src, const float* diff_dst,
                                      float* diff_weights) const {
    return {src32_, src, dst32_, diff_dst, filter32_, diff_weights, conv32_, bwd_filter32_,
            math_bwd_filter32_};
  }
  void weight_gradient(const WeightGradient& a) {
    const float one = 1.f, zero = 0.f;
    DTRAIN_CUDNN_CALL(cudnnSetConvolutionMathType(a.conv, a.math));
    OpTimer timer(stream_, "conv.backward_weights");
    DTRAIN_CUDNN_CALL(cudnnConvolutionBackwardFilter(handle_, &one, a.src, a.x, a.dst, a.dy,
                                                     a.conv, a.algo, workspace_,
                                                     workspace_bytes_, &zero, a.filter, a.dw));
  }

  // In bf16/fp16, the weight gradient may run on the fp32 tensors instead (TF32 tensor cores
  // where allowed): cuDNN's reduced-precision weight-gradient kernels for NCHW took 3x the
  // time of TF32's on ResNet-20's shapes (H200, 2026-11-26). Both are timed (cudnnFind*) and
  // the faster kept; TF32 keeps more mantissa bits than bf16/fp16, so nothing is lost.
  void maybe_weight_gradient_in_fp32(const ConvGeometry& g, bool allow_tf32) {
    if (bwd_filter_ms_ < 0.f) return;  // the heuristics chose: no times to compare
    src32_ = tensor4d(g.batch, g.in_channels, g.in_h, g.in_w);
    dst32_ = tensor4d(g.batch, g.out_channels, g.out_h(), g.out_w());
    filter32_ = filter4d(g, CUDNN_DATA_FLOAT);
    const cudnnMathType_t math = allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    conv32_ = conv2d_descriptor(g, math);
    int count = 0;
    cudnnConvolutionBwdFilterAlgoPerf_t filt[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    if (cudnnFindConvolutionBackwardFilterAlgorithm(handle_, src32_, dst32_, conv32_, filter32_,
                                                    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
                                                    &count, filt) != CUDNN_STATUS_SUCCESS)
      return;
    size_t workspace = workspace_bytes_;
    float ms = -1.f;
    cudnnMathType_t ranked{};
    const cudnnConvolutionBwdFilterAlgo_t algo =
        pick<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
            filt, count, &workspace, &ranked, &ms);
    if (ms < 0.f || ms >= bwd_filter_ms_) return;
    weight_gradient_fp32_ = true;
    bwd_filter32_ = algo;
    math_bwd_filter32_ = math;
    workspace_bytes_ = workspace;
  }
  // An fp32 operand as the convolution takes it: itself, or converted into `buffer`, unless
  // `buffer` already holds x converted (*converted == x, see backward_data).
  const void* in(const float* x, int64_t n, DeviceBuffer& buffer, const float** converted) {
    if (!reduced()) return x;
    void* out = buffer.get(stream_, reduced_bytes(n));
    if (*converted == x) return out;
    OpTimer timer(stream_, "conv.to_reduced");
    to_reduced(stream_, precision_, x, out, n);
    *converted = x;
    return out;
  }

  // Timed search (cudnnFind*, what PyTorch's cudnn.benchmark does) once per geometry: for the
  // small maps of ResNet-20 the heuristics' first choice was up to twice as slow. Falls back to
  // the heuristics (cudnnGet*_v7) if the search fails.
  void choose_algorithms() {
    int count = 0;
    cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    if (cudnnFindConvolutionForwardAlgorithm(handle_, src_, filter_, conv_, dst_,
                                             CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count,
                                             fwd) != CUDNN_STATUS_SUCCESS)
      DTRAIN_CUDNN_CALL(cudnnGetConvolutionForwardAlgorithm_v7(
          handle_, src_, filter_, conv_, dst_, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, fwd));
    fwd_ = pick<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
        fwd, count, &workspace_bytes_, &math_fwd_);
    cudnnConvolutionBwdDataAlgoPerf_t data[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    if (cudnnFindConvolutionBackwardDataAlgorithm(handle_, filter_, dst_, conv_, src_,
                                                  CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count,
                                                  data) != CUDNN_STATUS_SUCCESS)
      DTRAIN_CUDNN_CALL(cudnnGetConvolutionBackwardDataAlgorithm_v7(
          handle_, filter_, dst_, conv_, src_, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count,
          data));
    bwd_data_ = pick<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
        data, count, &workspace_bytes_, &math_bwd_data_);
    cudnnConvolutionBwdFilterAlgoPerf_t filt[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    if (cudnnFindConvolutionBackwardFilterAlgorithm(handle_, src_, dst_, conv_, filter_,
                                                    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
                                                    &count, filt) != CUDNN_STATUS_SUCCESS)
      DTRAIN_CUDNN_CALL(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
          handle_, src_, dst_, conv_, filter_, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count,
          filt));
    bwd_filter_ = pick<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
        filt, count, &workspace_bytes_, &math_bwd_filter_, &bwd_filter_ms_);
  }

  cudnnHandle_t handle_;
  Precision precision_;
  cudaStream_t stream_ = nullptr;
  int64_t src_n_ = 0, dst_n_ = 0, filter_n_ = 0;
  int64_t batch_ = 0, out_channels_ = 0, out_plane_ = 0;
  // Converted operands (reduced precision only), which fp32 tensor each holds now, and the
  // converted result of the call running.
  DeviceBuffer src16_, dst16_, filter16_, out16_;
  struct Converted {
    const float* src = nullptr;
    const float* weights = nullptr;
    const float* diff_dst = nullptr;
  } converted_;
  DeviceBuffer sums_;  // the bias gradient's partial sums
  cudnnTensorDescriptor_t src_ = nullptr, dst_ = nullptr;
  cudnnFilterDescriptor_t filter_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
  cudnnConvolutionFwdAlgo_t fwd_{};
  cudnnConvolutionBwdDataAlgo_t bwd_data_{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_{};
  // The math type each direction's algorithm was chosen under (set before each call).
  cudnnMathType_t math_fwd_{}, math_bwd_data_{}, math_bwd_filter_{};
  float bwd_filter_ms_ = -1.f;  // as timed by cudnnFind (-1: chosen by the heuristics)
  // The weight gradient on the fp32 tensors (maybe_weight_gradient_in_fp32).
  bool weight_gradient_fp32_ = false;
  cudnnTensorDescriptor_t src32_ = nullptr, dst32_ = nullptr;
  cudnnFilterDescriptor_t filter32_ = nullptr;
  cudnnConvolutionDescriptor_t conv32_ = nullptr;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter32_{};
  cudnnMathType_t math_bwd_filter32_{};
  size_t workspace_bytes_ = 0;
  void* workspace_ = nullptr;
};

// cuDNN's pooling backward needs the forward's input and output: the kernel keeps pointers to
// them (the layer keeps both tensors alive until its backward, see Pool2dKernel).
class CudnnPool2d : public Pool2dKernel {
 public:
  CudnnPool2d(cudnnHandle_t handle, const PoolGeometry& g) : handle_(handle) {
    DTRAIN_CUDNN_CALL(cudnnGetStream(handle_, &stream_));
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
    OpTimer timer(stream_, "pool.forward");
    DTRAIN_CUDNN_CALL(cudnnPoolingForward(handle_, pool_, &one, src_, src, &zero, dst_, dst));
    last_src_ = src;
    last_dst_ = dst;
  }
  void backward(const float* diff_dst, float* diff_src) override {
    if (!last_src_)
      throw CudaError("pooling backward before any forward (a bug in the caller)");
    const float one = 1.f, zero = 0.f;
    OpTimer timer(stream_, "pool.backward");
    DTRAIN_CUDNN_CALL(cudnnPoolingBackward(handle_, pool_, &one, dst_, last_dst_, dst_, diff_dst,
                                           src_, last_src_, &zero, src_, diff_src));
  }

 private:
  cudnnHandle_t handle_;
  cudaStream_t stream_ = nullptr;
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
