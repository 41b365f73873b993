#pragma once
// The update codec's hot loops (docs/architecture/core.md, "The update", steps 2-4 and 6-7) behind
// one interface, so that core/codec can pick the fastest implementation the CPU supports
// at run time. The semantics (and the plain reference every implementation must match
// bit for bit) live in core/codec.
//
// Bitmap layout: element j of a segment is bits 2(j%16) and 2(j%16)+1 of word j/16;
// 01 = +tau, 10 = -tau, 00 = nothing. Sparse word: bit 31 sign (1 = -tau), bits 0-30 index.
#include <cstdint>

namespace dtrain::kernels {

struct CodecEncodeArgs {
  float* residual = nullptr;      // n floats, updated in place
  const float* update = nullptr;  // n floats
  int64_t n = 0;                  // < 2^31 (one segment)
  float tau = 0.f;                // > 0
  float clip = 0.f;               // > 0: clamp the residual to [-clip, clip] after subtracting
  uint32_t* bitmap = nullptr;     // (n + 15) / 16 words, always written
  // n / 16 + 16 words. When count <= n / 16 it holds the sparse words of the sent elements in
  // index order; otherwise its contents are unspecified. Writing both costs nothing measurable
  // (the pass is memory bound) and spares a second pass over the bitmap.
  uint32_t* sparse = nullptr;
};

inline int64_t sparse_capacity(int64_t n) { return n / 16 + 16; }

struct CodecEncodeResult {
  int64_t count = 0;               // elements with |r + u| >= tau (all were sent and subtracted)
  int64_t nonfinite_index = -1;    // first i where r + u is NaN or Inf; -1 when none
  double residual_sum_squares = 0; // of the residual after subtracting (and clipping)
};

class CodecKernels {
 public:
  virtual ~CodecKernels() = default;
  virtual const char* name() const = 0;
  // One pass: r += u; for |r| >= tau: mark in the bitmap and r -= tau*sign(r); clip.
  // Which elements are sent does not depend on the encoding, so the caller chooses sparse or
  // bitmap from the returned count and no step can be lost on the way (docs/architecture/core.md,
  // "The update", step 3). When a non-finite value is found the residual is left
  // partly updated and must be dropped.
  virtual CodecEncodeResult encode(const CodecEncodeArgs& args) const = 0;
  // params[i] -= decoded[i] for the n elements the bitmap covers.
  virtual void apply_bitmap(const uint32_t* bitmap, int64_t n, float tau, float* params) const = 0;
  // params[idx] -= (sign ? -tau : tau) for each word; indices are distinct within a message.
  virtual void apply_sparse(const uint32_t* words, int64_t count, float tau,
                            float* params) const = 0;
};

// nullptr when this CPU lacks the instructions (checked at run time).
const CodecKernels* cpu_codec_avx512();
const CodecKernels* cpu_codec_avx2();

}  // namespace dtrain::kernels
