#include "core/codec/device_codec.h"

#include <chrono>

#include "core/codec/reference_codec.h"

namespace dtrain::core {
namespace {
using Clock = std::chrono::steady_clock;

// Adds the seconds since construction to `total` when profiling (after waiting for the device).
class Span {
 public:
  Span(bool on, kernels::Backend& backend, double& total) : on_(on), backend_(backend), total_(total) {
    if (on_) {
      backend_.synchronize();
      start_ = Clock::now();
    }
  }
  ~Span() {
    if (!on_) return;
    backend_.synchronize();
    total_ += std::chrono::duration<double>(Clock::now() - start_).count();
  }

 private:
  bool on_;
  kernels::Backend& backend_;
  double& total_;
  Clock::time_point start_;
};
}  // namespace

DeviceCodec::DeviceCodec(kernels::Backend& backend) : backend_(backend) {
  for (Tensor* t : {&bitmap_, &sparse_, &received_}) t->set_memory(&backend);
}

EncodedMessage DeviceCodec::encode_segment(float* r, const float* u, int64_t n, float tau,
                                           float clip, double* residual_sum_squares) {
  bitmap_.resize({bitmap_words(n)});
  sparse_.resize({kernels::sparse_capacity(n)});
  const kernels::CodecEncodeArgs args{r, u, n, tau, clip, words(bitmap_), words(sparse_)};
  kernels::CodecEncodeResult result;
  {
    Span span(profiling_, backend_, profile_.encode_s);
    result = backend_.codec().encode(args);
  }
  if (result.nonfinite_index >= 0) {
    // As on the CPU: the element's residual was not stored, so r + u is what the kernel saw.
    const int64_t i = result.nonfinite_index;
    float ri = 0.f, ui = 0.f;
    backend_.download(&ri, r + i, 1);
    backend_.download(&ui, u + i, 1);
    refuse_nonfinite_update(i, ri + ui);
  }
  if (residual_sum_squares) *residual_sum_squares = result.residual_sum_squares;
  EncodedMessage m = message_for(tau, n, result.count);
  const bool sparse = m.encoding == Encoding::kSparse;
  m.words.resize(size_t(sparse ? result.count : bitmap_words(n)));
  last_words_ = words(sparse ? sparse_ : bitmap_);
  Span span(profiling_, backend_, profile_.copy_s);
  if (!m.words.empty())
    backend_.download(reinterpret_cast<float*>(m.words.data()),
                      sparse ? sparse_.data() : bitmap_.data(), int64_t(m.words.size()));
  return m;
}

void DeviceCodec::apply(const EncodedMessage& m, float* params, float* clear,
                        const uint32_t* on_device) {
  const int64_t count = int64_t(m.words.size());
  if (count == 0) return;
  Span span(profiling_, backend_, profile_.apply_s);
  const uint32_t* w = on_device;
  if (!w) {
    received_.resize({count});
    received_.copy_from_host(reinterpret_cast<const float*>(m.words.data()));
    w = words(received_);
  }
  const kernels::CodecKernels& codec = backend_.codec();
  float* p = params + m.param_offset;
  if (m.encoding == Encoding::kSparse) {
    codec.apply_sparse(w, count, m.tau, p);
    if (clear) backend_.clear_sent_sparse(w, count, clear + m.param_offset);
  } else {
    codec.apply_bitmap(w, m.length, m.tau, p);
    if (clear) backend_.clear_sent_bitmap(w, m.length, clear + m.param_offset);
  }
}

}  // namespace dtrain::core
