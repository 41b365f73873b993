#pragma once
// Visits the elements a message sent (docs/architecture/core.md, "The update": formats): fn(index,
// value) with the index into the whole parameter vector and the value the message adds to the
// update, +tau or -tau (params -= value when the message is applied). One walk over both encodings
// for everything that reads a message element by element: decoding, audits, momentum masking.
#include <cstdint>

#include "core/codec/message.h"

namespace dtrain::core {

template <class Fn>
void for_each_sent(const EncodedMessage& m, Fn&& fn) {
  const int64_t base = m.param_offset;
  if (m.encoding == Encoding::kSparse) {
    for (uint32_t w : m.words)
      fn(base + int64_t(w & kSparseIndexMask), (w & kSparseSignBit) ? -m.tau : m.tau);
    return;
  }
  for (int64_t word = 0; word < int64_t(m.words.size()); ++word) {
    uint32_t bits = m.words[word];
    while (bits) {  // only the non-zero codes: a sparse-ish bitmap is mostly zeros
      const int slot = __builtin_ctz(bits) / 2;
      const uint32_t code = (bits >> (2 * slot)) & 3u;
      bits &= ~(3u << (2 * slot));
      const int64_t i = word * 16 + slot;
      if (i >= m.length) return;
      if (code == 1u) fn(base + i, m.tau);
      else if (code == 2u) fn(base + i, -m.tau);
    }
  }
}

}  // namespace dtrain::core
