#pragma once
// Bytes as text where JSON carries them (a ROC part's scores, etcd's keys and values): standard
// base64 with padding, libsodium's ORIGINAL variant.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace dtrain::transport {

std::string to_base64(const void* data, size_t bytes);
inline std::string to_base64(std::string_view bytes) {
  return to_base64(bytes.data(), bytes.size());
}

// Decodes `text` into `out`, which has room for `most` bytes; the bytes decoded, or nothing when
// `text` is not base64 or holds more than `most` (judged from its length before decoding).
std::optional<size_t> from_base64(std::string_view text, void* out, size_t most);

}  // namespace dtrain::transport
