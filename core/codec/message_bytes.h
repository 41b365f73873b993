#pragma once
// An EncodedMessage as bytes for other nodes (the transport carries them opaquely): the 40-byte
// header of message.h (id, origin, encoding, tau, offset, length, count; little-endian) and the
// words. Parsing checks everything a forged or broken message could use to write outside the
// model: the encoding, offset + length within the model, the word count the encoding implies,
// every sparse index within the segment, and a finite, positive tau.
#include <cstdint>
#include <string>
#include <vector>

#include "core/codec/message.h"

namespace dtrain::core {

std::vector<uint8_t> message_to_bytes(const EncodedMessage& m);

// False (with the reason in `error`) for anything that is not a message for a model of
// `num_params` parameters.
bool message_from_bytes(const uint8_t* data, size_t size, int64_t num_params, EncodedMessage& out,
                        std::string& error);

}  // namespace dtrain::core
