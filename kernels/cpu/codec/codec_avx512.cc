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
    const int64_t sparse_limit = a.n / 16;  // beyond it the message is a bitmap anyway
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
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
      const __mmask16 sent = pos | neg;
      // No test of `sent`: at 1% density that branch mispredicts more than the store costs.
      if (count <= sparse_limit) {
        __m512i words = _mm512_add_epi32(lane, _mm512_set1_epi32(static_cast<int>(i)));
        words = _mm512_mask_or_epi32(words, neg, words, sign);
        // Compress in a register and store all 16 lanes: compress-to-memory is slow on Zen 4.
        _mm512_storeu_si512(a.sparse + count, _mm512_maskz_compress_epi32(sent, words));
      }
      count += __builtin_popcount(static_cast<uint32_t>(sent));
      if ((i / 16) % kFlush == kFlush - 1) flush(squares, squares_wide);
    }
    flush(squares, squares_wide);
    alignas(64) double lanes[8];
    _mm512_store_pd(lanes, squares_wide);
    for (double s : lanes) out.residual_sum_squares += s;
    finish_encode_tail(a, full, count, out);
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
      // Full words load and store all 16 lanes (masked stores are slow on Zen 4); only the
      // ragged last word is masked, so nothing beyond n is touched.
      const bool ragged = 16 * (w + 1) > n;
      const __mmask16 live = ragged ? static_cast<__mmask16>((1u << (n - 16 * w)) - 1) : 0xFFFF;
      __m512 v = _mm512_maskz_loadu_ps(live, p);
      v = _mm512_mask_sub_ps(v, pos, v, tau);
      v = _mm512_mask_add_ps(v, neg, v, tau);
      if (ragged) _mm512_mask_storeu_ps(p, live, v);
      else _mm512_storeu_ps(p, v);
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
