#include "core/codec/message_check.h"

#include <cmath>

namespace dtrain::core {

bool check_message(const EncodedMessage& m, int64_t num_params, std::string& error) {
  if (m.encoding != Encoding::kSparse && m.encoding != Encoding::kBitmap) {
    error = "unknown encoding " + std::to_string(int(m.encoding));
    return false;
  }
  if (!std::isfinite(m.tau) || m.tau <= 0.f) {
    error = "tau is not a positive number";
    return false;
  }
  if (m.length <= 0 || m.length > kMaxSegmentLength || m.param_offset < 0 ||
      m.param_offset > num_params || m.length > num_params - m.param_offset) {
    error = "segment [" + std::to_string(m.param_offset) + ", +" + std::to_string(m.length) +
            ") is outside the model's " + std::to_string(num_params) + " parameters";
    return false;
  }
  const int64_t words = static_cast<int64_t>(m.words.size());
  const int64_t expected = m.encoding == Encoding::kBitmap ? bitmap_words(m.length) : m.count;
  if (m.count < 0 || m.count > m.length || words != expected) {
    error = "word count " + std::to_string(words) + " does not match the encoding";
    return false;
  }
  if (m.encoding == Encoding::kSparse) {
    for (uint32_t w : m.words)
      if (int64_t(w & kSparseIndexMask) >= m.length) {
        error = "a sparse index lies outside the segment";
        return false;
      }
  } else if (m.length % 16 != 0) {
    // Bits past the end of the segment would decode outside it.
    const int used = static_cast<int>(m.length % 16) * 2;
    if ((m.words.back() >> used) != 0) {
      error = "bitmap bits past the end of the segment";
      return false;
    }
  }
  return true;
}

}  // namespace dtrain::core
