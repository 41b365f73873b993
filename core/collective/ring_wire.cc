#include "core/collective/ring_wire.h"

#include <algorithm>
#include <cstring>

#include "kernels/precision.h"

namespace dtrain::core {

void round_for_wire(float* values, int64_t n, int64_t begin, int64_t end, const RingWire& wire) {
  if (!wire.bf16) return;
  end = std::min(end, n - wire.exact_last);
  for (int64_t i = begin; i < end; ++i) values[i] = kernels::round_to_bf16(values[i]);
}

int64_t bf16_prefix(const float* values, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, values + i, 4);
    if (bits & 0xFFFFu) return i;
  }
  return std::max<int64_t>(n, 0);
}

bool all_bf16(const float* values, int64_t n) { return bf16_prefix(values, n) == std::max<int64_t>(n, 0); }

std::vector<uint16_t> bf16_bits(const float* values, int64_t n) {
  std::vector<uint16_t> out(size_t(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, values + i, 4);
    out[size_t(i)] = uint16_t(bits >> 16);
  }
  return out;
}

void floats_from_bf16(const uint16_t* bits, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t word = uint32_t(bits[i]) << 16;
    std::memcpy(out + i, &word, 4);
  }
}

}  // namespace dtrain::core
