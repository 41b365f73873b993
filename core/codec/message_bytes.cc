#include "core/codec/message_bytes.h"

#include <cmath>
#include <cstring>

namespace dtrain::core {
namespace {

template <class T>
void put(std::vector<uint8_t>& out, size_t at, T v) {
  std::memcpy(out.data() + at, &v, sizeof v);  // the wire is little-endian, as x86-64/arm64 are
}
template <class T>
T get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

std::vector<uint8_t> message_to_bytes(const EncodedMessage& m) {
  std::vector<uint8_t> out(kMessageHeaderBytes + m.words.size() * 4, 0);
  put<uint64_t>(out, 0, m.id);
  put<uint32_t>(out, 8, m.origin);
  out[12] = static_cast<uint8_t>(m.encoding);
  put<float>(out, 16, m.tau);
  put<int64_t>(out, 20, m.param_offset);
  put<int64_t>(out, 28, m.length);
  put<uint32_t>(out, 36, static_cast<uint32_t>(m.count));
  if (!m.words.empty()) std::memcpy(out.data() + kMessageHeaderBytes, m.words.data(), m.words.size() * 4);
  return out;
}

bool message_from_bytes(const uint8_t* data, size_t size, int64_t num_params, EncodedMessage& out,
                        std::string& error) {
  if (size < size_t(kMessageHeaderBytes) || (size - kMessageHeaderBytes) % 4 != 0) {
    error = "message of " + std::to_string(size) + " bytes: not a header plus whole words";
    return false;
  }
  out.id = get<uint64_t>(data);
  out.origin = get<uint32_t>(data + 8);
  const uint8_t encoding = data[12];
  out.tau = get<float>(data + 16);
  out.param_offset = get<int64_t>(data + 20);
  out.length = get<int64_t>(data + 28);
  out.count = get<uint32_t>(data + 36);
  const size_t words = (size - kMessageHeaderBytes) / 4;
  if (encoding > 1) {
    error = "unknown encoding " + std::to_string(encoding);
    return false;
  }
  out.encoding = static_cast<Encoding>(encoding);
  if (!std::isfinite(out.tau) || out.tau <= 0.f) {
    error = "tau is not a positive number";
    return false;
  }
  if (out.length <= 0 || out.length > kMaxSegmentLength || out.param_offset < 0 ||
      out.param_offset > num_params || out.length > num_params - out.param_offset) {
    error = "segment [" + std::to_string(out.param_offset) + ", +" + std::to_string(out.length) +
            ") is outside the model's " + std::to_string(num_params) + " parameters";
    return false;
  }
  const size_t expected = out.encoding == Encoding::kBitmap
                              ? static_cast<size_t>(bitmap_words(out.length))
                              : static_cast<size_t>(out.count);
  if (words != expected || out.count > out.length) {
    error = "word count " + std::to_string(words) + " does not match the encoding";
    return false;
  }
  out.words.resize(words);
  if (words) std::memcpy(out.words.data(), data + kMessageHeaderBytes, words * 4);
  if (out.encoding == Encoding::kSparse) {
    for (uint32_t w : out.words)
      if (int64_t(w & kSparseIndexMask) >= out.length) {
        error = "a sparse index lies outside the segment";
        return false;
      }
  } else if (out.length % 16 != 0) {
    // Bits past the end of the segment would decode outside it.
    const uint32_t last = out.words.back();
    const int used = static_cast<int>(out.length % 16) * 2;
    if ((last >> used) != 0) {
      error = "bitmap bits past the end of the segment";
      return false;
    }
  }
  return true;
}

}  // namespace dtrain::core
