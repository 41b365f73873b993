#pragma once
// The codec written as plainly as docs/architecture/core.md ("The update") states it. It defines
// the semantics: the fast kernels (kernels/cpu/codec, kernels/cuda) must produce the same
// words and the same residual, bit for bit, and tests hold them to it. It is also the
// fallback on CPUs without AVX2.
#include <cstdint>

#include "core/codec/message.h"

namespace dtrain::core {

// One segment (n <= kMaxSegmentLength): r += u; count c = #{|r| >= tau}; choose the encoding
// from c; then, and only then, write the message and subtract tau*sign from each sent element;
// clip the residual to [-clip, clip] when clip > 0. Fills tau, encoding, length, count, words.
// A NaN or Inf in u (or r + u) throws UserError before the residual is changed.
// residual_sum_squares (optional) receives sum(r^2) afterwards.
EncodedMessage reference_encode(float* residual, const float* update, int64_t n, float tau,
                                float clip, double* residual_sum_squares = nullptr);

// params[param_offset + i] -= decoded[i]; `params` is the whole parameter vector.
void reference_apply(const EncodedMessage& message, float* params);

// out[param_offset + i] += decoded[i] (tests and audits sum messages with it).
void reference_decode_add(const EncodedMessage& message, float* out);

// Throws the UserError every implementation gives for a NaN or Inf at parameter `index`.
[[noreturn]] void refuse_nonfinite_update(int64_t index, float value);

}  // namespace dtrain::core
