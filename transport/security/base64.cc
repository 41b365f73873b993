#include "transport/security/base64.h"

#include <sodium.h>

namespace dtrain::transport {
namespace {

constexpr int kVariant = sodium_base64_VARIANT_ORIGINAL;

}  // namespace

std::string to_base64(const void* data, size_t bytes) {
  std::string out(sodium_base64_encoded_len(bytes, kVariant), '\0');
  sodium_bin2base64(out.data(), out.size(), static_cast<const unsigned char*>(data), bytes,
                    kVariant);
  out.resize(out.size() - 1);  // the terminating NUL
  return out;
}

std::optional<size_t> from_base64(std::string_view text, void* out, size_t most) {
  if (text.size() > sodium_base64_encoded_len(most, kVariant)) return std::nullopt;
  size_t got = 0;
  if (sodium_base642bin(static_cast<unsigned char*>(out), most, text.data(), text.size(), nullptr,
                        &got, nullptr, kVariant) != 0)
    return std::nullopt;
  return got;
}

}  // namespace dtrain::transport
