#include "daemon/protocol/wire_text.h"

#include <algorithm>

namespace dtrain::daemon {
namespace {

// The length of the well-formed UTF-8 sequence at `s[i]` (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF), or 0.
size_t sequence_length(std::string_view s, size_t i) {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = at(i);
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c == 0xE0) n = 3, lo = 0xA0;
  else if (c >= 0xE1 && c <= 0xEC) n = 3;
  else if (c == 0xED) n = 3, hi = 0x9F;
  else if (c >= 0xEE && c <= 0xEF) n = 3;
  else if (c == 0xF0) n = 4, lo = 0x90;
  else if (c >= 0xF1 && c <= 0xF3) n = 4;
  else if (c == 0xF4) n = 4, hi = 0x8F;
  else return 0;
  if (i + n > s.size() || at(i + 1) < lo || at(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (at(i + k) < 0x80 || at(i + k) > 0xBF) return 0;
  return n;
}

}  // namespace

std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = sequence_length(text, i);
    if (n == 0) {
      out += '?';
      ++i;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

bool TextBudget::take(const flatbuffers::String* s, size_t limit, std::string& out) {
  if (!s) {
    out.clear();
    return true;
  }
  const size_t n = std::min<size_t>(s->size(), limit);
  if (n > left_) return false;
  left_ -= n;
  out = valid_utf8(std::string_view(s->c_str(), n));
  return true;
}

}  // namespace dtrain::daemon
