#pragma once
// Control frames are FlatBuffers ControlFrame tables (daemon/protocol/control.fbs) carried as
// the bodies of ControlConnection frames. Building them, and reading one only after the
// FlatBuffers verifier and the union checks passed.
#include <cstdint>
#include <vector>

#include "transport/control/control_error.h"
#include "daemon/protocol/control_generated.h"

namespace dtrain::daemon {

// The frame inside `body`, verified; throws ControlError(kMalformed) naming the problem.
const control::ControlFrame& read_control_frame(const std::vector<uint8_t>& body);
// The frame points into `body`: a temporary would leave it dangling.
const control::ControlFrame& read_control_frame(std::vector<uint8_t>&& body) = delete;

// The finished builder's bytes, ready for ControlConnection::send.
std::vector<uint8_t> control_frame_bytes(flatbuffers::FlatBufferBuilder& fbb,
                                         control::ControlBody type,
                                         flatbuffers::Offset<void> body);

}  // namespace dtrain::daemon
