#pragma once
// Texts read off a received control table. Two rules for every reader:
// - All the texts of one message together take at most the frame's own size: a verified frame
//   may point many entries at one shared string, and copying each would allocate far more than
//   the peer sent (a 4 MiB frame naming one 4 KiB path a million times).
// - They are valid UTF-8 (a byte that is not becomes '?'): they end up in JSON (job records,
//   replies, /status), whose writer refuses anything else.
#include <cstddef>
#include <string>
#include <string_view>

#include <flatbuffers/flatbuffers.h>

namespace dtrain::daemon {

class TextBudget {
 public:
  explicit TextBudget(size_t bytes) : left_(bytes) {}
  // `s` (absent: "") cut at `limit` bytes, as valid UTF-8, into `out`; false when the message's
  // texts would exceed the budget.
  bool take(const flatbuffers::String* s, size_t limit, std::string& out);

 private:
  size_t left_;
};

// `text` with every byte that does not belong to a well-formed UTF-8 sequence (a cut-off one
// at the end included) replaced by '?'.
std::string valid_utf8(std::string_view text);

}  // namespace dtrain::daemon
