// The codec with AVX2: 8 floats per vector, two vectors per bitmap word.
// Compiled with -mavx2 -mfma; only reached after codec_dispatch.cc checked the CPU.
#include <immintrin.h>

#include <cmath>

#include "kernels/codec_kernels.h"
#include "kernels/cpu/codec/bit_spread.h"
#include "kernels/cpu/codec/scalar_codec.h"

namespace dtrain::kernels::cpu {
namespace {

struct HalfWord {
  __m256 value;
  uint32_t pos, neg, bad;
};

// r += u, mark, subtract (an exact select, so -0.0 stays -0.0), clip.
inline HalfWord encode8(const float* r, const float* u, __m256 tau, __m256 neg_tau, __m256 inf,
                        __m256 sign_mask, bool clip, __m256 lo, __m256 hi) {
  __m256 v = _mm256_add_ps(_mm256_loadu_ps(r), _mm256_loadu_ps(u));
  const __m256 bad = _mm256_cmp_ps(_mm256_andnot_ps(sign_mask, v), inf, _CMP_NLT_UQ);
  const __m256 pos = _mm256_cmp_ps(v, tau, _CMP_GE_OQ);
  const __m256 neg = _mm256_cmp_ps(v, neg_tau, _CMP_LE_OQ);
  v = _mm256_blendv_ps(v, _mm256_sub_ps(v, tau), pos);
  v = _mm256_blendv_ps(v, _mm256_add_ps(v, tau), neg);
  if (clip) v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
  return {v, static_cast<uint32_t>(_mm256_movemask_ps(pos)),
          static_cast<uint32_t>(_mm256_movemask_ps(neg)),
          static_cast<uint32_t>(_mm256_movemask_ps(bad))};
}

// Lane k of the result is all ones when bit k of `bits` is set.
inline __m256 lane_mask(uint32_t bits) {
  const __m256i select = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256i b = _mm256_and_si256(_mm256_set1_epi32(static_cast<int>(bits)), select);
  return _mm256_castsi256_ps(_mm256_cmpeq_epi32(b, select));
}

constexpr int64_t kFlush = 128;

inline void flush(__m256& squares, __m256d& wide) {
  wide = _mm256_add_pd(wide, _mm256_cvtps_pd(_mm256_castps256_ps128(squares)));
  wide = _mm256_add_pd(wide, _mm256_cvtps_pd(_mm256_extractf128_ps(squares, 1)));
  squares = _mm256_setzero_ps();
}

// For each 8-bit lane mask, the permutation that moves the selected lanes to the front
// (AVX2 has no compress instruction).
struct CompressTable {
  alignas(32) uint32_t lanes[256][8];
  CompressTable() {
    for (int mask = 0; mask < 256; ++mask) {
      int k = 0;
      for (int lane = 0; lane < 8; ++lane)
        if (mask & (1 << lane)) lanes[mask][k++] = static_cast<uint32_t>(lane);
      while (k < 8) lanes[mask][k++] = 0;
    }
  }
};
// Built on first use, never at program start: this file is compiled for AVX2 and static
// initialisers run on every CPU.
const CompressTable& compress_table() {
  static const CompressTable table;
  return table;
}

// Stores the sparse words of the lanes selected in `sent` (sign bit for `neg`) at out and
// returns how many; always writes 8 words.
inline int compress8(const CompressTable& table, uint32_t sent, uint32_t neg,
                     int64_t first_index, uint32_t* out) {
  __m256i words = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                   _mm256_set1_epi32(static_cast<int>(first_index)));
  const __m256i sign = _mm256_and_si256(_mm256_castps_si256(lane_mask(neg)),
                                        _mm256_set1_epi32(static_cast<int>(0x80000000u)));
  words = _mm256_or_si256(words, sign);
  const __m256i perm = _mm256_load_si256(reinterpret_cast<const __m256i*>(table.lanes[sent]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_permutevar8x32_epi32(words, perm));
  return __builtin_popcount(sent);
}

class Avx2Codec final : public CodecKernels {
 public:
  const char* name() const override { return "avx2"; }

  CodecEncodeResult encode(const CodecEncodeArgs& a) const override {
    CodecEncodeResult out;
    const __m256 tau = _mm256_set1_ps(a.tau), neg_tau = _mm256_set1_ps(-a.tau);
    const __m256 inf = _mm256_set1_ps(INFINITY), sign_mask = _mm256_set1_ps(-0.0f);
    const bool clip = a.clip > 0.f;
    const __m256 hi = _mm256_set1_ps(a.clip), lo = _mm256_set1_ps(-a.clip);
    // Float lanes flushed into double lanes every kFlush words (see codec_avx512.cc).
    __m256 squares = _mm256_setzero_ps();
    __m256d squares_wide = _mm256_setzero_pd();
    const int64_t full = a.n / 16 * 16;
    float* r = a.residual;
    const float* u = a.update;
    int64_t count = 0;
    const int64_t sparse_limit = a.n / 16;
    const CompressTable& table = compress_table();
    for (int64_t i = 0; i < full; i += 16) {
      const HalfWord l = encode8(r + i, u + i, tau, neg_tau, inf, sign_mask, clip, lo, hi);
      const HalfWord h = encode8(r + i + 8, u + i + 8, tau, neg_tau, inf, sign_mask, clip, lo, hi);
      if (l.bad | h.bad) {
        out.nonfinite_index = i + __builtin_ctz(l.bad | (h.bad << 8));
        return out;
      }
      _mm256_storeu_ps(r + i, l.value);
      _mm256_storeu_ps(r + i + 8, h.value);
      squares = _mm256_fmadd_ps(l.value, l.value, squares);
      squares = _mm256_fmadd_ps(h.value, h.value, squares);
      const uint32_t pos = l.pos | (h.pos << 8), neg = l.neg | (h.neg << 8);
      a.bitmap[i / 16] = bitmap_word(pos, neg);
      if ((pos | neg) && count <= sparse_limit) {
        int64_t k = count + compress8(table, l.pos | l.neg, l.neg, i, a.sparse + count);
        if (k <= sparse_limit) compress8(table, h.pos | h.neg, h.neg, i + 8, a.sparse + k);
      }
      count += __builtin_popcount(pos | neg);
      if ((i / 16) % kFlush == kFlush - 1) flush(squares, squares_wide);
    }
    flush(squares, squares_wide);
    alignas(32) double lanes[4];
    _mm256_store_pd(lanes, squares_wide);
    for (double s : lanes) out.residual_sum_squares += s;
    finish_encode_tail(a, full, count, out);
    return out;
  }

  void apply_bitmap(const uint32_t* bitmap, int64_t n, float tau_value,
                    float* params) const override {
    const __m256 tau = _mm256_set1_ps(tau_value);
    const int64_t full_words = n / 16;
    for (int64_t w = 0; w < full_words; ++w) {
      const uint32_t word = bitmap[w];
      if (word == 0) continue;
      const uint32_t pos = gather_even_bits32(word), neg = gather_even_bits32(word >> 1);
      for (int half = 0; half < 2; ++half) {
        const uint32_t p8 = (pos >> (8 * half)) & 0xFF, n8 = (neg >> (8 * half)) & 0xFF;
        if ((p8 | n8) == 0) continue;
        float* p = params + 16 * w + 8 * half;
        __m256 v = _mm256_loadu_ps(p);
        v = _mm256_blendv_ps(v, _mm256_sub_ps(v, tau), lane_mask(p8));
        v = _mm256_blendv_ps(v, _mm256_add_ps(v, tau), lane_mask(n8));
        _mm256_storeu_ps(p, v);
      }
    }
    // The ragged last word, element by element.
    if (full_words * 16 < n) {
      const uint32_t word = bitmap[full_words];
      for (int64_t i = full_words * 16; i < n; ++i) {
        const uint32_t code = (word >> (2 * (i - full_words * 16))) & 3u;
        if (code == 1u) params[i] = params[i] - tau_value;
        else if (code == 2u) params[i] = params[i] + tau_value;
      }
    }
  }

  void apply_sparse(const uint32_t* words, int64_t count, float tau,
                    float* params) const override {
    apply_sparse_scalar(words, count, tau, params);
  }
};

}  // namespace

const CodecKernels& avx2_codec_instance() {
  static const Avx2Codec codec;
  return codec;
}

}  // namespace dtrain::kernels::cpu
