// The control frame (daemon/protocol/control.fbs) as it crosses a ControlConnection: built,
// then read only after the FlatBuffers verifier and the union checks passed.
#include "daemon/protocol/control_frames.h"
#include "daemon/protocol/control_messages.h"

#include <catch2/catch.hpp>

#include <cstring>
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

TEST_CASE("a Start whose 64-bit readable_jobs vector is misaligned is refused", "[control]") {
  // Hostile bytes can move a vector 4 bytes along: the FlatBuffers verifier takes it (it checks
  // the length word's 4-byte alignment), but reading its 8-byte elements is undefined behaviour
  // (transport/schema/vector_alignment.h). A fuzzer found such a frame.
  StartMessage start;
  start.spec = "model: {}";
  start.members.push_back({1, "node-a", "10.0.0.5", 4000, 1});
  start.readable_jobs = {1, 0xABCDEF0123456789ull};  // element 0's low word reads as length 1
  std::vector<uint8_t> frame = start_frame(7, start);
  JobMessageIn in;
  REQUIRE(read_job_message(frame, in));  // as built, it is taken
  CHECK(in.start.readable_jobs == start.readable_jobs);
  // The table's offset to the vector (a uoffset_t that points at the vector) is moved 4 on.
  const auto* vec = read_control_frame(frame).body_as_JobMessage()->start()->readable_jobs();
  const size_t at = size_t(reinterpret_cast<const uint8_t*>(vec) - frame.data());
  size_t moved = 0;
  for (size_t p = 0; p + 4 <= at; p += 4) {
    uint32_t offset;
    std::memcpy(&offset, frame.data() + p, 4);
    if (p + offset != at) continue;
    offset += 4;
    std::memcpy(frame.data() + p, &offset, 4);
    ++moved;
  }
  REQUIRE(moved == 1);
  CHECK_FALSE(read_job_message(frame, in));
}

}  // namespace dtrain::daemon
