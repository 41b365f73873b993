// Encoded messages as bytes between nodes: a round trip keeps every field and word, and every
// message that could write outside the model (or is not a message at all) is refused by name.
#include <catch2/catch.hpp>

#include <cstring>
#include <limits>

#include "core/codec/message_bytes.h"
#include "core/codec/reference_codec.h"

using namespace dtrain::core;

namespace {

EncodedMessage encode_some(int64_t n, float fill_every, float tau) {
  std::vector<float> u(n, 0.f), r(n, 0.f);
  for (int64_t i = 0; i < n; i += static_cast<int64_t>(fill_every)) u[i] = (i % 3 ? 1.f : -1.f);
  EncodedMessage m = reference_encode(r.data(), u.data(), n, tau, 0.f, nullptr);
  m.id = 77;
  m.origin = 5;
  return m;
}

bool parses(const std::vector<uint8_t>& b, int64_t params, std::string* why = nullptr) {
  EncodedMessage out;
  std::string error;
  const bool ok = message_from_bytes(b.data(), b.size(), params, out, error);
  if (why) *why = error;
  return ok;
}

}  // namespace

TEST_CASE("messages survive the trip through bytes", "[codec]") {
  for (float every : {1.f, 3.f, 50.f}) {
    EncodedMessage m = encode_some(1000, every, 0.5f);
    m.param_offset = 24;
    const std::vector<uint8_t> b = message_to_bytes(m);
    EncodedMessage back;
    std::string error;
    REQUIRE(message_from_bytes(b.data(), b.size(), 1024, back, error));
    CHECK(back.id == m.id);
    CHECK(back.origin == m.origin);
    CHECK(back.encoding == m.encoding);
    CHECK(back.tau == m.tau);
    CHECK(back.param_offset == 24);
    CHECK(back.length == m.length);
    CHECK(back.count == m.count);
    CHECK(back.words == m.words);
  }
}

TEST_CASE("messages that could write outside the model are refused", "[codec]") {
  const EncodedMessage sparse = encode_some(1000, 50.f, 0.5f);
  const EncodedMessage bitmap = encode_some(1000, 1.f, 0.5f);
  REQUIRE(sparse.encoding == Encoding::kSparse);
  REQUIRE(bitmap.encoding == Encoding::kBitmap);
  std::string why;
  // Too short, ragged, empty.
  CHECK_FALSE(parses({}, 1000));
  CHECK_FALSE(parses(std::vector<uint8_t>(39), 1000));
  std::vector<uint8_t> b = message_to_bytes(sparse);
  b.push_back(0);
  CHECK_FALSE(parses(b, 1000));
  // A model smaller than the segment.
  CHECK_FALSE(parses(message_to_bytes(sparse), 999, &why));
  CHECK(why.find("outside the model") != std::string::npos);
  // Offsets past the end, negative, or overflowing.
  for (int64_t offset : {int64_t(1), int64_t(-1), std::numeric_limits<int64_t>::max()}) {
    EncodedMessage m = sparse;
    m.param_offset = offset;
    CHECK_FALSE(parses(message_to_bytes(m), 1000));
  }
  // A sparse index beyond the segment.
  EncodedMessage m = sparse;
  m.words[0] = 1000;
  CHECK_FALSE(parses(message_to_bytes(m), 1000, &why));
  CHECK(why.find("sparse index") != std::string::npos);
  // Word count that disagrees with the count, or with the bitmap length.
  m = sparse;
  m.count += 1;
  CHECK_FALSE(parses(message_to_bytes(m), 1000));
  m = bitmap;
  m.words.pop_back();
  CHECK_FALSE(parses(message_to_bytes(m), 1000));
  // Bitmap bits past the end of a segment of 1000 (= 62.5 words).
  m = bitmap;
  m.words.back() |= 1u << 30;
  CHECK_FALSE(parses(message_to_bytes(m), 1000, &why));
  CHECK(why.find("past the end") != std::string::npos);
  // Unknown encoding, and tau that is not a positive number.
  b = message_to_bytes(sparse);
  b[12] = 7;
  CHECK_FALSE(parses(b, 1000));
  for (float tau : {0.f, -1.f, std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    m = sparse;
    m.tau = tau;
    CHECK_FALSE(parses(message_to_bytes(m), 1000));
  }
}
