#pragma once
// What the backend operations take (kernels/backend.h): shapes, windows and the argument
// bundles of the operations with many inputs. Plain data, no device code, so core/ and every
// backend (host C++ and nvcc) share them. Every pointer is in the backend's memory (host for
// the CPU backend, device for CUDA).
#include <cstdint>

namespace dtrain::kernels {

// The sliding window of a convolution or a pooling: size, step and zero padding per side.
struct Window2d {
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t out_h(int64_t in_h) const { return (in_h + 2 * pad_h - kernel_h) / stride_h + 1; }
  int64_t out_w(int64_t in_w) const { return (in_w + 2 * pad_w - kernel_w) / stride_w + 1; }
};

// How a [batch, channels, height, width] activation is laid out in memory: block 0 is plain
// NCHW; a block B > 0 is oneDNN's channel-blocked nChw{B}c, B channels of one pixel side by
// side (channels a multiple of B, so the element count is NCHW's). The CPU backend keeps
// activations blocked between the layers that can (docs/architecture/kernels.md, "Layouts");
// other backends see only 0.
struct ConvGeometry {
  int64_t batch = 0, in_channels = 0, in_h = 0, in_w = 0, out_channels = 0;
  Window2d window;
  int64_t src_block = 0, dst_block = 0;  // of src and diff_src; of dst and diff_dst
  int64_t out_h() const { return window.out_h(in_h); }
  int64_t out_w() const { return window.out_w(in_w); }
  // Elements of the input, output and filter tensors (NCHW; filters OIHW).
  int64_t src_elements() const { return batch * in_channels * in_h * in_w; }
  int64_t dst_elements() const { return batch * out_channels * out_h() * out_w(); }
  int64_t filter_elements() const {
    return out_channels * in_channels * window.kernel_h * window.kernel_w;
  }
};

struct PoolGeometry {
  int64_t batch = 0, channels = 0, in_h = 0, in_w = 0;
  Window2d window;
  int64_t src_block = 0, dst_block = 0;  // layouts, as ConvGeometry's
  bool max = true;  // false: average (padding excluded from the count)
  int64_t out_h() const { return window.out_h(in_h); }
  int64_t out_w() const { return window.out_w(in_w); }
};

// What matrix products and convolutions compute in (training.precision): fp32, or bf16/fp16
// inputs with fp32 accumulation and fp32 results (mixed precision: the parameters, activations,
// gradients, updater state and the codec stay fp32; docs/architecture/kernels.md, "Mixed
// precision").
enum class Precision { kFp32, kBf16, kFp16 };

// Elements a gemm operand spans in memory: op(X) is rows x cols, X row-major with leading
// dimension ld, stored transposed (cols x rows) when `trans`. What a backend converts to
// bf16/fp16 before the product.
inline int64_t gemm_operand_elements(bool trans, int64_t rows, int64_t cols, int64_t ld) {
  const int64_t stored_rows = trans ? cols : rows, stored_cols = trans ? rows : cols;
  return stored_rows > 0 ? (stored_rows - 1) * ld + stored_cols : 0;
}

// Activation functions; softmax normalises each row. The names are in core/layers/activation.
enum class Activation { kIdentity, kRelu, kLeakyRelu, kTanh, kSigmoid, kSoftmax };
constexpr float kLeakyReluSlope = 0.01f;

// Losses of the output layer, averaged over the rows (examples) of a minibatch.
enum class Loss { kMcxent, kXent, kMse };
constexpr float kProbFloor = 1e-7f;  // keeps log() finite for saturated outputs

struct LossArgs {
  Loss loss = Loss::kMcxent;
  Activation activation = Activation::kSoftmax;  // the one that produced `a`
  const float* a = nullptr;                      // outputs [rows, cols]
  const float* targets = nullptr;                // [rows, cols]
  int64_t rows = 0, cols = 0;
  // When set: d(mean loss)/d(z) for the pre-activation z. The canonical pairs (softmax +
  // mcxent, sigmoid + xent) use the fused, numerically stable a - y.
  float* dz = nullptr;
};

// Batch normalisation over [batch, channels, plane] (plane = height x width; 1 after a dense
// layer). Training normalises with the minibatch's statistics and moves the running ones
// (running = decay * running + (1 - decay) * batch; the variance unbiased, as cuDNN and PyTorch
// do); inference uses the running ones. forward writes save_mean and save_inv_std, which
// backward reads.
struct BatchNormArgs {
  int64_t batch = 0, channels = 0, plane = 1;
  int64_t block = 0;  // the layout of x, y, dy and dx (ConvGeometry's); 0 after a dense layer
  float eps = 1e-5f, decay = 0.9f;
  bool training = true;
  const float* x = nullptr;
  float* y = nullptr;
  const float* gamma = nullptr;
  const float* beta = nullptr;
  float* running_mean = nullptr;
  float* running_var = nullptr;
  float* save_mean = nullptr;     // [channels]
  float* save_inv_std = nullptr;  // [channels]
  // backward: overwrites dgamma, dbeta and (when set) dx.
  const float* dy = nullptr;
  float* dx = nullptr;
  float* dgamma = nullptr;
  float* dbeta = nullptr;
};

// The updaters' rules: g (L2 already added) becomes the step u, in place. `scale` is the
// learning rate, except for Adam/AMSGrad where it is lr * sqrt(1 - b2^t) / (1 - b1^t) (computed
// once on the host, so every backend applies the same number).
enum class UpdaterRule { kSgd, kNesterovs, kAdam, kAmsgrad, kRmsProp };

struct UpdaterArgs {
  UpdaterRule rule = UpdaterRule::kSgd;
  float* g_to_u = nullptr;
  float* state = nullptr;  // the rule's state vectors, each n long, one after the other
  int64_t n = 0;
  float scale = 0.f;
  float momentum = 0.9f;  // nesterovs
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;  // adam, amsgrad, rmsprop (epsilon)
  float rms_decay = 0.95f;
};

// How many state vectors of n a rule keeps (momentum, moments, running maximum).
inline int updater_state_vectors(UpdaterRule rule) {
  switch (rule) {
    case UpdaterRule::kSgd: return 0;
    case UpdaterRule::kNesterovs: return 1;
    case UpdaterRule::kAdam: return 2;
    case UpdaterRule::kAmsgrad: return 3;
    case UpdaterRule::kRmsProp: return 1;
  }
  return 0;
}

}  // namespace dtrain::kernels
