// The control frame (daemon/protocol/control.fbs) as it crosses a ControlConnection: built,
// then read only after the FlatBuffers verifier and the union checks passed.
#include "daemon/protocol/control_frames.h"

#include <catch2/catch.hpp>

#include <functional>
#include <vector>

namespace dtrain::daemon {
namespace {

using Kind = transport::ControlError::Kind;

Kind kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const transport::ControlError& e) {
    INFO(e.what());
    return e.kind();
  }
  FAIL("no ControlError thrown");
  return Kind::kClosed;
}

}  // namespace

TEST_CASE("a control frame reads back as it was built", "[control]") {
  flatbuffers::FlatBufferBuilder fbb;
  const auto reg = control::CreateRegister(fbb, fbb.CreateString("node-a"),
                                           fbb.CreateString("10.0.0.5"), 40123, 16);
  const std::vector<uint8_t> bytes =
      control_frame_bytes(fbb, control::ControlBody::Register, reg.Union());
  const control::ControlFrame& f = read_control_frame(bytes);
  REQUIRE(f.body_type() == control::ControlBody::Register);
  CHECK(f.body_as_Register()->node_name()->str() == "node-a");
  CHECK(f.body_as_Register()->data_port() == 40123);
  CHECK(f.body_as_Register()->cores() == 16);
}

TEST_CASE("control frame bodies are verified before use", "[control]") {
  const std::vector<uint8_t> empty, junk(100, 0xFF);
  CHECK(kind_of([&] { read_control_frame(empty); }) == Kind::kMalformed);
  CHECK(kind_of([&] { read_control_frame(junk); }) == Kind::kMalformed);
  // A union type without its table passes the FlatBuffers verifier: read_control_frame refuses it.
  flatbuffers::FlatBufferBuilder fbb;
  control::ControlFrameBuilder b(fbb);
  b.add_body_type(control::ControlBody::MeshMap);
  fbb.Finish(b.Finish());
  const std::vector<uint8_t> bytes(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  CHECK(kind_of([&] { read_control_frame(bytes); }) == Kind::kMalformed);
}

}  // namespace dtrain::daemon
