#pragma once
// Rounding an fp32 value to bf16 or fp16 and back, on the host: what a GPU does to the inputs of
// a mixed-precision matrix product or convolution. The emulated GPU rounds with it, so the
// trainer's mixed-precision paths (and fp16's overflow to infinity) run and are tested on
// machines without a GPU.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "kernels/op_args.h"

namespace dtrain::kernels {

// bf16 keeps fp32's exponent and the top 7 bits of its mantissa: round to nearest even, NaN
// stays NaN, a value that rounds past the largest finite bf16 becomes infinity (as
// __float2bfloat16_rn does).
inline float round_to_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0) return x;  // NaN
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  bits &= 0xFFFF0000u;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

// fp16: 5 exponent bits (largest finite 65504, smallest subnormal 2^-24), 10 mantissa bits.
// Round to nearest even, overflowing to infinity, as __float2half_rn does. (By hand: clang 14,
// which builds the fuzzers, has no _Float16 on x86.)
inline float round_to_fp16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const uint32_t sign = bits & 0x80000000u, magnitude = bits & 0x7FFFFFFFu;
  if (magnitude >= 0x7F800000u) return x;  // infinity, NaN
  float out;
  if (magnitude >= 0x477FF000u) {  // 65520 and up: past the tie above 65504
    bits = sign | 0x7F800000u;
  } else if (magnitude < 0x38800000u) {  // below 2^-14: subnormal, steps of 2^-24
    const float steps = std::nearbyint(std::fabs(x) * 0x1p24f);  // exact: a power-of-two scale
    out = steps * 0x1p-24f;
    std::memcpy(&bits, &out, 4);
    bits |= sign;
  } else {  // normal: keep 10 of the 23 mantissa bits
    bits = sign | ((magnitude + 0xFFFu + ((magnitude >> 13) & 1u)) & 0xFFFFE000u);
  }
  std::memcpy(&out, &bits, 4);
  return out;
}

inline float round_to(Precision p, float x) {
  switch (p) {
    case Precision::kBf16: return round_to_bf16(x);
    case Precision::kFp16: return round_to_fp16(x);
    case Precision::kFp32: break;
  }
  return x;
}

// training.precision's names ("fp32", "bf16", "fp16"; the spec parser allows no others).
inline Precision precision_of(const std::string& name) {
  if (name == "bf16") return Precision::kBf16;
  if (name == "fp16") return Precision::kFp16;
  return Precision::kFp32;
}
inline const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
    case Precision::kFp32: break;
  }
  return "fp32";
}
}  // namespace dtrain::kernels
