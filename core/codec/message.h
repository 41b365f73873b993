#pragma once
// One encoded update (docs/architecture/core.md, "The update"): the elements of one parameter
// segment whose residual reached tau, each worth exactly +tau or -tau. Decoding is additive, so
// messages sum, and every replica is the initial parameters minus the sum of all messages it
// applied.
#include <cstdint>
#include <vector>

namespace dtrain::core {

enum class Encoding : uint8_t {
  kSparse = 0,  // uint32 words: bit 31 sign (1 = -tau), bits 0-30 index within the segment
  kBitmap = 1,  // 2 bits per element, 16 per word: 00 nothing, 01 +tau, 10 -tau
};

const char* encoding_name(Encoding e);

// Indices have 31 bits, so a segment holds at most 2^31 elements; larger models are split.
constexpr int64_t kMaxSegmentLength = int64_t(1) << 31;
constexpr uint32_t kSparseSignBit = 0x80000000u;
constexpr uint32_t kSparseIndexMask = 0x7FFFFFFFu;
// id, origin, encoding, tau, offset, length, count, rounded up to 8 bytes.
constexpr int64_t kMessageHeaderBytes = 40;

struct EncodedMessage {
  uint64_t id = 0;            // unique per origin; (origin, id) identifies a message
  uint32_t origin = 0;        // worker that produced it
  Encoding encoding = Encoding::kSparse;
  float tau = 0.f;
  int64_t param_offset = 0;   // first parameter of the segment
  int64_t length = 0;         // elements in the segment (the bitmap needs it)
  int64_t count = 0;          // elements sent
  std::vector<uint32_t> words;
  // Where its worker was when it produced it (not part of the encoded bytes: the mesh carries
  // them in its own header). batch -1: a minibatch taken over from a lost node at an epoch end.
  int64_t epoch = 0, batch = -1;

  int64_t payload_bytes() const { return static_cast<int64_t>(words.size()) * 4; }
  int64_t wire_bytes() const { return kMessageHeaderBytes + payload_bytes(); }
};

// Sparse while the count is at most length/16 (then it is no larger than the bitmap).
inline Encoding choose_encoding(int64_t count, int64_t length) {
  return count <= length / 16 ? Encoding::kSparse : Encoding::kBitmap;
}

inline int64_t bitmap_words(int64_t length) { return (length + 15) / 16; }

// The message for `count` elements sent out of `length` at threshold tau, its encoding chosen;
// every encoder fills in the words (the sparse words, or the whole bitmap).
inline EncodedMessage message_for(float tau, int64_t length, int64_t count) {
  EncodedMessage m;
  m.tau = tau;
  m.length = length;
  m.count = count;
  m.encoding = choose_encoding(count, length);
  return m;
}

}  // namespace dtrain::core
