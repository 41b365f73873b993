#pragma once
// Scalar pieces shared by the SIMD codecs: the ragged tail of an encode (fewer than 16
// elements) and the sparse apply, which is random access and gains nothing from vectors.
// The arithmetic is written exactly as in core/codec's reference so results are bit-identical.
#include <cmath>
#include <cstdint>

#include "kernels/codec_kernels.h"

namespace dtrain::kernels::cpu {

struct ScalarTailResult {
  uint32_t word = 0;
  int64_t count = 0;
  int64_t nonfinite_index = -1;
  double sum_squares = 0;
};

// Elements [begin, end) with end - begin <= 16, forming one bitmap word.
inline ScalarTailResult encode_scalar_word(float* r, const float* u, int64_t begin, int64_t end,
                                           float tau, float clip) {
  ScalarTailResult out;
  for (int64_t i = begin; i < end; ++i) {
    float v = r[i] + u[i];
    if (!std::isfinite(v)) {
      out.nonfinite_index = i;
      return out;
    }
    const int lane = static_cast<int>(i - begin);
    if (v >= tau) {
      v = v - tau;
      out.word |= 1u << (2 * lane);
      ++out.count;
    } else if (v <= -tau) {
      v = v + tau;
      out.word |= 2u << (2 * lane);
      ++out.count;
    }
    if (clip > 0.f) v = std::fmin(std::fmax(v, -clip), clip);
    r[i] = v;
    out.sum_squares += double(v) * double(v);
  }
  return out;
}

// Appends the sparse words for one bitmap word whose first element is `base`, while the
// message can still be sparse (count <= limit); `count` is the number sent before this word.
inline void append_sparse(uint32_t word, int64_t base, int64_t limit, int64_t count,
                          uint32_t* sparse) {
  if (word == 0 || count > limit) return;
  while (word) {
    const int bit = __builtin_ctz(word);
    const uint32_t index = static_cast<uint32_t>(base + bit / 2);
    sparse[count++] = (bit & 1) ? (index | 0x80000000u) : index;
    word &= word - 1;
  }
}

// Encodes the elements after the last full word (`full` = n / 16 * 16) and completes `out`
// with the count; `count` is what the vector loop sent.
inline void finish_encode_tail(const CodecEncodeArgs& a, int64_t full, int64_t count,
                               CodecEncodeResult& out) {
  if (full < a.n) {
    const ScalarTailResult t = encode_scalar_word(a.residual, a.update, full, a.n, a.tau, a.clip);
    if (t.nonfinite_index >= 0) {
      out.nonfinite_index = t.nonfinite_index;
      return;
    }
    a.bitmap[full / 16] = t.word;
    append_sparse(t.word, full, a.n / 16, count, a.sparse);
    count += t.count;
    out.residual_sum_squares += t.sum_squares;
  }
  out.count = count;
}

inline void apply_sparse_scalar(const uint32_t* words, int64_t count, float tau, float* params) {
  for (int64_t k = 0; k < count; ++k) {
    const uint32_t w = words[k];
    float& p = params[w & 0x7FFFFFFFu];
    p = (w >> 31) ? p + tau : p - tau;
  }
}

}  // namespace dtrain::kernels::cpu
