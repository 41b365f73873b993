#pragma once
// Whether an encoded message that came from another node may be applied to a model of
// `num_params` parameters. It checks everything a forged or broken message could use to write
// outside the model: the encoding, offset + length within the model, the word count the
// encoding implies, every sparse index within the segment, bitmap bits past the segment's end,
// and a finite, positive tau. The mesh reads messages in daemon/protocol/mesh_payloads.h.
#include <cstdint>
#include <string>

#include "core/codec/message.h"

namespace dtrain::core {

// False, with the reason in `error`, for a message that must not be applied.
bool check_message(const EncodedMessage& m, int64_t num_params, std::string& error);

}  // namespace dtrain::core
