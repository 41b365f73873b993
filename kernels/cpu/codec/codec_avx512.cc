// The codec with AVX-512F: 16 floats per iteration, which is exactly one bitmap word.
// Compiled with -mavx512f; only reached after codec_dispatch.cc checked the CPU.
#include <immintrin.h>

#include <cmath>

#include "kernels/codec_kernels.h"
#include "kernels/cpu/codec/bit_spread.h"
#include "kernels/cpu/codec/scalar_codec.h"

namespace dtrain::kernels::cpu {
namespace {

constexpr int64_t kFlush = 256;

inline void flush(__m512& squares, __m512d& wide) {
  wide = _mm512_add_pd(wide, _mm512_cvtps_pd(_mm512_castps512_ps256(squares)));
  wide = _mm512_add_pd(wide, _mm512_cvtps_pd(_mm256_castpd_ps(
                                 _mm512_extractf64x4_pd(_mm512_castps_pd(squares), 1))));
  squares = _mm512_setzero_ps();
}

class Avx512Codec final : public CodecKernels {
 public:
  const char* name() const override { return "avx512"; }

  CodecEncodeResult encode(const CodecEncodeArgs& a) const override {
    CodecEncodeResult out;
    const __m512 tau = _mm512_set1_ps(a.tau);
    const __m512 neg_tau = _mm512_set1_ps(-a.tau);
    const __m512 inf = _mm512_set1_ps(INFINITY);
    const bool clip = a.clip > 0.f;
    const __m512 hi = _mm512_set1_ps(a.clip), lo = _mm512_set1_ps(-a.clip);
    // Squares go into float lanes and, every kFlush vectors, into double lanes: float sums
    // over millions of elements would lose the norm's third digit.
    __m512 squares = _mm512_setzero_ps();
    __m512d squares_wide = _mm512_setzero_pd();
    const int64_t full = a.n / 16 * 16;
    float* r = a.residual;
    const float* u = a.update;
    int64_t count = 0;
    for (int64_t i = 0; i < full; i += 16) {
      __m512 v = _mm512_add_ps(_mm512_loadu_ps(r + i), _mm512_loadu_ps(u + i));
      const __mmask16 bad = _mm512_cmp_ps_mask(_mm512_abs_ps(v), inf, _CMP_NLT_UQ);
      if (bad) {
        out.nonfinite_index = i + __builtin_ctz(bad);
        return out;
      }
      const __mmask16 pos = _mm512_cmp_ps_mask(v, tau, _CMP_GE_OQ);
      const __mmask16 neg = _mm512_cmp_ps_mask(v, neg_tau, _CMP_LE_OQ);
      v = _mm512_mask_sub_ps(v, pos, v, tau);
      v = _mm512_mask_add_ps(v, neg, v, tau);
      if (clip) v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
      _mm512_storeu_ps(r + i, v);
      squares = _mm512_fmadd_ps(v, v, squares);
      a.bitmap[i / 16] = bitmap_word(pos, neg);
      count += __builtin_popcount(static_cast<uint32_t>(pos | neg));
      if ((i / 16) % kFlush == kFlush - 1) flush(squares, squares_wide);
    }
    flush(squares, squares_wide);
    alignas(64) double lanes[8];
    _mm512_store_pd(lanes, squares_wide);
    for (double s : lanes) out.residual_sum_squares += s;
    if (full < a.n) {
      const ScalarTailResult t = encode_scalar_word(r, u, full, a.n, a.tau, a.clip);
      if (t.nonfinite_index >= 0) {
        out.nonfinite_index = t.nonfinite_index;
        return out;
      }
      a.bitmap[full / 16] = t.word;
      count += t.count;
      out.residual_sum_squares += t.sum_squares;
    }
    out.count = count;
    return out;
  }

  void apply_bitmap(const uint32_t* bitmap, int64_t n, float tau_value,
                    float* params) const override {
    const __m512 tau = _mm512_set1_ps(tau_value);
    const int64_t words = (n + 15) / 16;
    for (int64_t w = 0; w < words; ++w) {
      const uint32_t word = bitmap[w];
      if (word == 0) continue;
      const __mmask16 pos = static_cast<__mmask16>(gather_even_bits32(word));
      const __mmask16 neg = static_cast<__mmask16>(gather_even_bits32(word >> 1));
      float* p = params + 16 * w;
      // Bits past n are zero, so the masked load and store never touch memory beyond it.
      const __mmask16 live = pos | neg;
      __m512 v = _mm512_maskz_loadu_ps(live, p);
      v = _mm512_mask_sub_ps(v, pos, v, tau);
      v = _mm512_mask_add_ps(v, neg, v, tau);
      _mm512_mask_storeu_ps(p, live, v);
    }
  }

  void apply_sparse(const uint32_t* words, int64_t count, float tau,
                    float* params) const override {
    apply_sparse_scalar(words, count, tau, params);
  }
};

}  // namespace

const CodecKernels& avx512_codec_instance() {
  static const Avx512Codec codec;
  return codec;
}

}  // namespace dtrain::kernels::cpu
