#include "kernels/emulated/emulated_gpu.h"

#include <vector>

#include "kernels/precision.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <stdexcept>

namespace dtrain::kernels {
namespace {

constexpr int kMaxDevices = 16;
std::atomic<int64_t> g_bytes_in_use[kMaxDevices];

// Added to every address this backend hands out. Bit 62 makes the address non-canonical on
// x86-64 (and outside any user mapping elsewhere), so dereferencing it on the host faults, while
// pointer arithmetic (a tensor's offsets) keeps working; host() takes the tag off again right
// before the CPU arithmetic runs.
constexpr uintptr_t kDeviceTag = uintptr_t(1) << 62;

template <typename T>
T* host(T* p) {
  return p ? reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(p) - kDeviceTag) : nullptr;
}

// The allocations of one emulated device, to tell its pointers from host ones.
class Allocations {
 public:
  explicit Allocations(int device) : device_(device % kMaxDevices) {}
  float* allocate(int64_t n) {
    const size_t bytes = (size_t(n > 0 ? n : 1) * sizeof(float) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, bytes);
    if (!p) throw std::bad_alloc();
    const uintptr_t tagged = reinterpret_cast<uintptr_t>(p) + kDeviceTag;
    std::lock_guard<std::mutex> lock(mutex_);
    blocks_[tagged] = bytes;
    g_bytes_in_use[device_] += int64_t(bytes);
    return reinterpret_cast<float*>(tagged);
  }
  void release(float* p) {
    if (!p) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = blocks_.find(reinterpret_cast<uintptr_t>(p));
      if (it == blocks_.end())
        throw std::logic_error("emulated GPU: release of memory it did not allocate");
      g_bytes_in_use[device_] -= int64_t(it->second);
      blocks_.erase(it);
    }
    std::free(host(p));
  }
  void check(const void* p, const char* op) const {
    if (!p) return;
    const uintptr_t at = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.upper_bound(at);
    if (it != blocks_.begin()) {
      --it;
      if (at < it->first + it->second) return;
    }
    throw std::logic_error(std::string("emulated GPU: ") + op +
                           " was given a host pointer (device memory expected)");
  }

 private:
  int device_;
  mutable std::mutex mutex_;
  std::map<uintptr_t, size_t> blocks_;
};

class CheckedConv : public Conv2dKernel {
 public:
  CheckedConv(std::unique_ptr<Conv2dKernel> inner, const Allocations& mem)
      : inner_(std::move(inner)), mem_(mem) {}
  void forward(const float* src, const float* w, const float* b, float* dst) override {
    for (const void* p : {(const void*)src, (const void*)w, (const void*)b, (const void*)dst})
      mem_.check(p, "conv forward");
    inner_->forward(host(src), host(w), host(b), host(dst));
  }
  void backward_data(const float* dd, const float* w, float* ds) override {
    for (const void* p : {(const void*)dd, (const void*)w, (const void*)ds})
      mem_.check(p, "conv backward_data");
    inner_->backward_data(host(dd), host(w), host(ds));
  }
  void backward_weights(const float* s, const float* dd, float* dw, float* db) override {
    for (const void* p : {(const void*)s, (const void*)dd, (const void*)dw, (const void*)db})
      mem_.check(p, "conv backward_weights");
    inner_->backward_weights(host(s), host(dd), host(dw), host(db));
  }

 private:
  std::unique_ptr<Conv2dKernel> inner_;
  const Allocations& mem_;
};

// A copy of x[0, n) rounded to `p` (the inputs of a mixed-precision product), in `scratch`.
const float* rounded(Precision p, const float* x, int64_t n, std::vector<float>& scratch) {
  scratch.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) scratch[size_t(i)] = round_to(p, x[i]);
  return scratch.data();
}

void round_in_place(Precision p, float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = round_to(p, x[i]);
}

// A convolution as a GPU computes it in bf16/fp16: inputs rounded, products accumulated in
// fp32, results rounded (cuDNN writes them in the reduced type; the bias is added in fp32 on a
// GPU, inside the rounding here: close enough for what the emulation is for, the trainer's
// paths and fp16's range).
class RoundingConv : public Conv2dKernel {
 public:
  RoundingConv(std::unique_ptr<Conv2dKernel> inner, const ConvGeometry& g, Precision p)
      : inner_(std::move(inner)),
        p_(p),
        src_(g.src_elements()),
        w_(g.filter_elements()),
        dst_(g.dst_elements()) {}
  void forward(const float* src, const float* w, const float* b, float* dst) override {
    inner_->forward(rounded(p_, src, src_, a_), rounded(p_, w, w_, b_), b, dst);
    round_in_place(p_, dst, dst_);
  }
  void backward_data(const float* dd, const float* w, float* ds) override {
    inner_->backward_data(rounded(p_, dd, dst_, a_), rounded(p_, w, w_, b_), ds);
    round_in_place(p_, ds, src_);
  }
  void backward_weights(const float* s, const float* dd, float* dw, float* db) override {
    inner_->backward_weights(rounded(p_, s, src_, a_), rounded(p_, dd, dst_, b_), dw, db);
    round_in_place(p_, dw, w_);
  }

 private:
  std::unique_ptr<Conv2dKernel> inner_;
  Precision p_;
  int64_t src_, w_, dst_;
  std::vector<float> a_, b_;
};

class CheckedPool : public Pool2dKernel {
 public:
  CheckedPool(std::unique_ptr<Pool2dKernel> inner, const Allocations& mem)
      : inner_(std::move(inner)), mem_(mem) {}
  void forward(const float* src, float* dst) override {
    mem_.check(src, "pool forward");
    mem_.check(dst, "pool forward");
    inner_->forward(host(src), host(dst));
  }
  void backward(const float* dd, float* ds) override {
    mem_.check(dd, "pool backward");
    mem_.check(ds, "pool backward");
    inner_->backward(host(dd), host(ds));
  }

 private:
  std::unique_ptr<Pool2dKernel> inner_;
  const Allocations& mem_;
};

class CheckedCodec final : public CodecKernels {
 public:
  CheckedCodec(const CodecKernels& inner, const Allocations& mem) : inner_(inner), mem_(mem) {}
  const char* name() const override { return "emulated-gpu"; }
  CodecEncodeResult encode(const CodecEncodeArgs& a) const override {
    for (const void* p : {(const void*)a.residual, (const void*)a.update, (const void*)a.bitmap,
                          (const void*)a.sparse})
      mem_.check(p, "codec encode");
    CodecEncodeArgs on_host = a;
    on_host.residual = host(a.residual);
    on_host.update = host(a.update);
    on_host.bitmap = host(a.bitmap);
    on_host.sparse = host(a.sparse);
    return inner_.encode(on_host);
  }
  void apply_bitmap(const uint32_t* bitmap, int64_t n, float tau, float* params) const override {
    mem_.check(bitmap, "codec apply_bitmap");
    mem_.check(params, "codec apply_bitmap");
    inner_.apply_bitmap(host(bitmap), n, tau, host(params));
  }
  void apply_sparse(const uint32_t* words, int64_t count, float tau, float* params) const override {
    mem_.check(words, "codec apply_sparse");
    mem_.check(params, "codec apply_sparse");
    inner_.apply_sparse(host(words), count, tau, host(params));
  }

 private:
  const CodecKernels& inner_;
  const Allocations& mem_;
};

class EmulatedGpu final : public Backend {
 public:
  explicit EmulatedGpu(int device)
      : device_(device), cpu_(cpu_backend()), mem_(device), codec_(cpu_.codec(), mem_) {}

  std::string name() const override { return "emulated-gpu:" + std::to_string(device_); }
  int device() const override { return device_; }
  bool host_memory() const override { return false; }
  float* allocate(int64_t n) override { return mem_.allocate(n); }
  void release(float* p) override { mem_.release(p); }
  void upload(float* dst, const float* src, int64_t n) override {
    mem_.check(dst, "upload");
    if (n > 0) std::memcpy(host(dst), src, sizeof(float) * n);
  }
  void download(float* dst, const float* src, int64_t n) override {
    mem_.check(src, "download");
    if (n > 0) std::memcpy(dst, host(src), sizeof(float) * n);
  }
  void copy(float* dst, const float* src, int64_t n) override {
    check(dst, src, "copy");
    cpu_.copy(host(dst), host(src), n);
  }
  void copy_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                 int64_t rows, int64_t cols) override {
    check(dst, src, "copy_rows");
    cpu_.copy_rows(host(dst), dst_stride, host(src), src_stride, rows, cols);
  }
  void fill(float* x, int64_t n, float v) override {
    check(x, x, "fill");
    cpu_.fill(host(x), n, v);
  }
  void synchronize() override {}

  void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
            int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) override {
    check(a, b, "gemm");
    check(c, c, "gemm");
    a = host(a);
    b = host(b);
    if (precision_ != Precision::kFp32) {
      // A and B as stored, rounded; the product in fp32.
      a = rounded(precision_, a, gemm_operand_elements(ta, m, k, lda), scratch_a_);
      b = rounded(precision_, b, gemm_operand_elements(tb, k, n, ldb), scratch_b_);
    }
    cpu_.gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, host(c), ldc);
  }
  void add_row_vector(float* x, const float* v, int64_t rows, int64_t cols) override {
    check(x, v, "add_row_vector");
    cpu_.add_row_vector(host(x), host(v), rows, cols);
  }
  void column_sums(const float* x, int64_t rows, int64_t cols, float* sums) override {
    check(x, sums, "column_sums");
    cpu_.column_sums(host(x), rows, cols, host(sums));
  }
  void axpy(float alpha, const float* x, float* y, int64_t n) override {
    check(x, y, "axpy");
    cpu_.axpy(alpha, host(x), host(y), n);
  }
  void multiply(const float* a, const float* b, float* out, int64_t n) override {
    check(a, b, "multiply");
    check(out, out, "multiply");
    cpu_.multiply(host(a), host(b), host(out), n);
  }
  void scale(float* x, int64_t n, float alpha) override {
    check(x, x, "scale");
    cpu_.scale(host(x), n, alpha);
  }
  double sum_squares(const float* x, int64_t n) override {
    check(x, x, "sum_squares");
    return cpu_.sum_squares(host(x), n);
  }
  void activation_forward(Activation act, float* x, int64_t rows, int64_t cols) override {
    check(x, x, "activation_forward");
    cpu_.activation_forward(act, host(x), rows, cols);
  }
  void activation_backward(Activation act, const float* a, float* d, int64_t rows,
                           int64_t cols) override {
    check(a, d, "activation_backward");
    cpu_.activation_backward(act, host(a), host(d), rows, cols);
  }
  double loss(const LossArgs& args) override {
    check(args.a, args.targets, "loss");
    check(args.dz, args.dz, "loss");
    LossArgs on_host = args;
    on_host.a = host(args.a);
    on_host.targets = host(args.targets);
    on_host.dz = host(args.dz);
    return cpu_.loss(on_host);
  }
  void dropout_forward(const float* in, float* out, float* mask, int64_t n, float rate,
                       uint64_t seed) override {
    check(in, out, "dropout_forward");
    check(mask, mask, "dropout_forward");
    cpu_.dropout_forward(host(in), host(out), host(mask), n, rate, seed);
  }
  void batch_norm_forward(const BatchNormArgs& a) override {
    check_bn(a, "batch_norm_forward");
    cpu_.batch_norm_forward(on_host(a));
  }
  void batch_norm_backward(const BatchNormArgs& a) override {
    check_bn(a, "batch_norm_backward");
    cpu_.batch_norm_backward(on_host(a));
  }
  void global_pool_forward(const float* in, float* out, int64_t planes, int64_t plane,
                           bool max) override {
    check(in, out, "global_pool_forward");
    cpu_.global_pool_forward(host(in), host(out), planes, plane, max);
  }
  void global_pool_backward(const float* in, const float* dout, float* din, int64_t planes,
                            int64_t plane, bool max) override {
    check(in, dout, "global_pool_backward");
    check(din, din, "global_pool_backward");
    cpu_.global_pool_backward(host(in), host(dout), host(din), planes, plane, max);
  }
  // The CPU's layouts too: the emulated GPU computes what the CPU backend would, bit for bit.
  int64_t activation_block() const override { return cpu_.activation_block(); }
  std::unique_ptr<Conv2dKernel> make_conv2d(const ConvGeometry& g) override {
    std::unique_ptr<Conv2dKernel> conv = cpu_.make_conv2d(g);
    if (precision_ != Precision::kFp32)
      conv = std::make_unique<RoundingConv>(std::move(conv), g, precision_);
    return std::make_unique<CheckedConv>(std::move(conv), mem_);
  }
  std::unique_ptr<Pool2dKernel> make_pool2d(const PoolGeometry& g) override {
    return std::make_unique<CheckedPool>(cpu_.make_pool2d(g), mem_);
  }
  void updater_step(const UpdaterArgs& a) override {
    check(a.g_to_u, a.state, "updater_step");
    UpdaterArgs on_host = a;
    on_host.g_to_u = host(a.g_to_u);
    on_host.state = host(a.state);
    cpu_.updater_step(on_host);
  }
  const CodecKernels& codec() override { return codec_; }
  void clear_sent_sparse(const uint32_t* words, int64_t count, float* x) override {
    check(words, x, "clear_sent_sparse");
    cpu_.clear_sent_sparse(host(words), count, host(x));
  }
  void clear_sent_bitmap(const uint32_t* bitmap, int64_t n, float* x) override {
    check(bitmap, x, "clear_sent_bitmap");
    cpu_.clear_sent_bitmap(host(bitmap), n, host(x));
  }
  void set_num_threads(int threads) override { cpu_.set_num_threads(threads); }

  // Products and convolutions made after this call compute in `p` (inputs rounded).
  bool set_precision(Precision p) override {
    precision_ = p;
    return true;
  }

 private:
  void check(const void* a, const void* b, const char* op) const {
    mem_.check(a, op);
    mem_.check(b, op);
  }
  void check_bn(const BatchNormArgs& a, const char* op) const {
    for (const void* p : {(const void*)a.x, (const void*)a.y, (const void*)a.gamma,
                          (const void*)a.beta, (const void*)a.running_mean,
                          (const void*)a.running_var, (const void*)a.save_mean,
                          (const void*)a.save_inv_std, (const void*)a.dy, (const void*)a.dx,
                          (const void*)a.dgamma, (const void*)a.dbeta})
      mem_.check(p, op);
  }
  static BatchNormArgs on_host(BatchNormArgs a) {
    a.x = host(a.x);
    a.y = host(a.y);
    a.gamma = host(a.gamma);
    a.beta = host(a.beta);
    a.running_mean = host(a.running_mean);
    a.running_var = host(a.running_var);
    a.save_mean = host(a.save_mean);
    a.save_inv_std = host(a.save_inv_std);
    a.dy = host(a.dy);
    a.dx = host(a.dx);
    a.dgamma = host(a.dgamma);
    a.dbeta = host(a.dbeta);
    return a;
  }

  int device_;
  Backend& cpu_;
  Allocations mem_;
  CheckedCodec codec_;
  Precision precision_ = Precision::kFp32;
  std::vector<float> scratch_a_, scratch_b_;
};

}  // namespace

int64_t emulated_gpu_bytes_in_use(int device) {
  return device >= 0 ? g_bytes_in_use[device % kMaxDevices].load() : 0;
}

std::unique_ptr<Backend> make_emulated_gpu(int device) {
  return std::make_unique<EmulatedGpu>(device);
}

}  // namespace dtrain::kernels
