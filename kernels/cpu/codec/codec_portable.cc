// The update codec without SIMD, for CPUs that have neither AVX2 nor AVX-512: one bitmap word
// (16 elements) at a time through the same scalar pieces the SIMD paths use for their tails,
// so its bits are the reference's.
#include "kernels/cpu/codec/scalar_codec.h"

namespace dtrain::kernels::cpu {
namespace {

class PortableCodec final : public CodecKernels {
 public:
  const char* name() const override { return "portable"; }

  CodecEncodeResult encode(const CodecEncodeArgs& a) const override {
    CodecEncodeResult out;
    const int64_t full = a.n / 16 * 16;
    int64_t count = 0;
    for (int64_t i = 0; i < full; i += 16) {
      const ScalarTailResult w = encode_scalar_word(a.residual, a.update, i, i + 16, a.tau, a.clip);
      if (w.nonfinite_index >= 0) {
        out.nonfinite_index = w.nonfinite_index;
        return out;
      }
      a.bitmap[i / 16] = w.word;
      append_sparse(w.word, i, a.n / 16, count, a.sparse);
      count += w.count;
      out.residual_sum_squares += w.sum_squares;
    }
    finish_encode_tail(a, full, count, out);
    return out;
  }

  void apply_bitmap(const uint32_t* bitmap, int64_t n, float tau, float* params) const override {
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t code = (bitmap[i / 16] >> (2 * (i % 16))) & 3u;
      if (code == 1u) params[i] = params[i] - tau;
      else if (code == 2u) params[i] = params[i] + tau;
    }
  }

  void apply_sparse(const uint32_t* words, int64_t count, float tau,
                    float* params) const override {
    apply_sparse_scalar(words, count, tau, params);
  }
};

}  // namespace

const CodecKernels& portable_codec_instance() {
  static const PortableCodec codec;
  return codec;
}

}  // namespace dtrain::kernels::cpu
