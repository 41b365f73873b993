#pragma once
// A part's ROC scores in a cluster evaluation's PartDone (daemon/README.md, "Evaluation and
// inference jobs"): the softmax outputs and labels of its examples, so that the controller's
// ROC is exactly the one-machine one. Raw little-endian float32 and int32, base64 (libsodium)
// in the JSON report.
#include <optional>

#include "core/eval/roc.h"
#include "daemon/protocol/control_messages.h"

namespace dtrain::daemon {

// At most this many bytes of scores per part: more fails the part with the fix.
constexpr size_t kMaxPartScoreBytes = 16u << 20;

Json encode_part_scores(const core::RocOneVsAll& roc);
// The scores a node sent, or nullopt when they are malformed, larger than the bound, not of
// `classes` classes and `rows` rows, or hold a label outside the classes.
std::optional<core::RocOneVsAll> decode_part_scores(const Json& scores, int64_t rows,
                                                    int64_t classes);

}  // namespace dtrain::daemon
