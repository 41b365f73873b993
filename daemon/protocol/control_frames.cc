#include "daemon/protocol/control_frames.h"

namespace dtrain::daemon {

using transport::ControlError;

const control::ControlFrame& read_control_frame(const std::vector<uint8_t>& body) {
  const std::string fix = "check that the other side runs the same dtrain release";
  flatbuffers::Verifier verifier(body.data(), body.size(), /*max_depth=*/16,
                                 /*max_tables=*/1 << 20);
  if (body.empty() || !control::VerifyControlFrameBuffer(verifier))
    throw ControlError(ControlError::Kind::kMalformed,
                       "a control frame of " + std::to_string(body.size()) +
                           " bytes is not a valid ControlFrame",
                       fix);
  const control::ControlFrame& frame = *control::GetControlFrame(body.data());
  // A union's type without its table passes the verifier.
  if (frame.body_type() == control::ControlBody::NONE || frame.body() == nullptr)
    throw ControlError(ControlError::Kind::kMalformed, "a control frame without a body", fix);
  return frame;
}

std::vector<uint8_t> control_frame_bytes(flatbuffers::FlatBufferBuilder& fbb,
                                         control::ControlBody type,
                                         flatbuffers::Offset<void> body) {
  fbb.Finish(control::CreateControlFrame(fbb, type, body));
  return std::vector<uint8_t>(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
}

}  // namespace dtrain::daemon
