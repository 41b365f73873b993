#pragma once
// Rounding an fp32 value to bf16 or fp16 and back, on the host: what a GPU does to the inputs of
// a mixed-precision matrix product or convolution. The emulated GPU rounds with it, so the
// trainer's mixed-precision paths (and fp16's overflow to infinity) run and are tested on
// machines without a GPU.
#include <cstdint>
#include <cstring>

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

// fp16: 5 exponent bits (largest finite 65504, smallest subnormal 2^-24), 10 mantissa bits;
// the compiler's _Float16 conversion rounds to nearest even and overflows to infinity, as
// __float2half_rn does.
inline float round_to_fp16(float x) { return static_cast<float>(static_cast<_Float16>(x)); }

inline float round_to(Precision p, float x) {
  switch (p) {
    case Precision::kBf16: return round_to_bf16(x);
    case Precision::kFp16: return round_to_fp16(x);
    case Precision::kFp32: break;
  }
  return x;
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
