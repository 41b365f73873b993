#pragma once
// Moves between the 2-bit bitmap codes and per-lane masks: bit k of a 16-lane mask becomes
// bit 2k of a word (spread) and back (gather). Plain shifts, because pdep/pext are microcoded
// and slow on the AMD parts before Zen 3.
#include <cstdint>

namespace dtrain::kernels::cpu {

inline uint32_t spread_bits16(uint32_t x) {
  x = (x | (x << 8)) & 0x00FF00FFu;
  x = (x | (x << 4)) & 0x0F0F0F0Fu;
  x = (x | (x << 2)) & 0x33333333u;
  x = (x | (x << 1)) & 0x55555555u;
  return x;
}

inline uint32_t gather_even_bits32(uint32_t x) {
  x &= 0x55555555u;
  x = (x | (x >> 1)) & 0x33333333u;
  x = (x | (x >> 2)) & 0x0F0F0F0Fu;
  x = (x | (x >> 4)) & 0x00FF00FFu;
  x = (x | (x >> 8)) & 0x0000FFFFu;
  return x;
}

// The 16-element bitmap word built from the positive and negative lane masks.
inline uint32_t bitmap_word(uint32_t positive16, uint32_t negative16) {
  return spread_bits16(positive16) | (spread_bits16(negative16) << 1);
}

}  // namespace dtrain::kernels::cpu
